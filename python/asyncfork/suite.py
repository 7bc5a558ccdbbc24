# SPDX-License-Identifier: GPL-2.0
"""Run test programs in one guest boot and judge them on the host.

A suite is a list of programs (name, timeout, command).  They run one after
the other inside a single boot (tests/guest/run-suite.sh); each leaves its
KTAP output, exit code and the kernel log it caused in a results folder that
the guest shares with the host.  This module parses those files; the pytest
files decide what passes.
"""

import contextlib
import json
import re
import shlex
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from asyncfork import vm
from asyncfork.paths import TOP

KTAP_RE = re.compile(
    r"^(?P<status>ok|not ok) (?P<num>\d+)(?: -)?\s*(?P<desc>.*?)"
    r"(?:\s*#\s*(?P<directive>SKIP|XFAIL|XPASS|TODO)\b\s*(?P<reason>.*))?\s*$")


@dataclass
class Case:
    name: str
    status: str  # pass, fail, skip, xfail

    def __str__(self):
        return f"{self.status}: {self.name}"


def parse_ktap(text: str) -> list[Case]:
    """Top-level test results of KTAP/TAP output, in order.

    A case is named by its description; a skip with an empty description
    ("ok 3 # SKIP reason") is named by its reason.  Repeated names get a
    " [n]" suffix so that every case has a stable, unique name.
    """
    cases, seen = [], {}
    for line in text.splitlines():
        m = KTAP_RE.match(line)
        if not m:
            continue
        d = m.group("directive")
        name = m.group("desc") or (m.group("reason") or "").strip() or f"#{m.group('num')}"
        if m.group("status") == "not ok":
            status = "xfail" if d == "XFAIL" else "fail"
        else:
            status = {"SKIP": "skip", "XFAIL": "xfail"}.get(d, "pass")
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            name = f"{name} [{seen[name]}]"
        cases.append(Case(name, status))
    return cases


def case_log(text: str, case: str, limit: int = 40) -> str:
    """The lines a failed case printed: from kselftest_harness's "#  RUN"
    line of the case to its result line, else the result line alone."""
    lines = text.splitlines()
    base = re.sub(r" \[\d+\]$", "", case)
    end = next((i for i in range(len(lines) - 1, -1, -1)
                if (m := KTAP_RE.match(lines[i])) and m.group("status") == "not ok"
                and m.group("desc") == base), None)
    if end is None:
        return ""
    start = next((i for i in range(end, -1, -1)
                  if lines[i].startswith("#") and lines[i].split()[1:3] == ["RUN", base]), end)
    return "\n".join(lines[max(start, end + 1 - limit):end + 1])


KHUGEPAGED_RUN_RE = re.compile(r"^Run test: (.*)$")
KHUGEPAGED_STATUS_RE = re.compile(r"\x1b\[3[123]m(OK|Fail|Skip)\x1b\[0m\s*$")


def parse_khugepaged(text: str) -> list[Case]:
    """khugepaged prints "Run test: NAME (CONTEXT:OPS)" and then steps that
    end in a coloured OK, Fail or Skip: a case per test, failed if any step
    failed, skipped if a step skipped and none failed."""
    cases: list[Case] = []
    for line in text.splitlines():
        m = KHUGEPAGED_RUN_RE.match(line)
        if m:
            cases.append(Case(m.group(1).strip(), "pass"))
            continue
        m = KHUGEPAGED_STATUS_RE.search(line)
        if m and cases:
            st = {"OK": "pass", "Fail": "fail", "Skip": "skip"}[m.group(1)]
            c = cases[-1]
            if st == "fail" or (st == "skip" and c.status == "pass"):
                c.status = st
    return cases


UFFD_RE = re.compile(r"^Testing (.+?)\.\.\. (done|skipped|failed)\b")


def parse_uffd_unit_tests(text: str) -> list[Case]:
    """uffd-unit-tests prints "Testing NAME on MEM... done|skipped|failed"."""
    return [Case(m.group(1), {"done": "pass", "skipped": "skip", "failed": "fail"}[m.group(2)])
            for m in map(UFFD_RE.match, text.splitlines()) if m]


STRESS_NG_FAIL_RE = re.compile(r"^stress-ng: fail:\s*\[\d+\]\s*(.*)$")
STRESS_NG_END_RE = re.compile(r"^stress-ng: info:\s*\[\d+\] (un)?successful run completed")


def parse_stress_ng(text: str) -> list[Case]:
    """stress-ng prints each verification failure as "stress-ng: fail: [PID]
    ..." and ends a run with "successful run completed" or "unsuccessful
    run completed": a case per failure and per run."""
    cases, runs = [], 0
    for line in text.splitlines():
        m = STRESS_NG_FAIL_RE.match(line)
        if m:
            cases.append(Case(m.group(1), "fail"))
        m = STRESS_NG_END_RE.match(line)
        if m:
            runs += 1
            cases.append(Case(f"stress-ng run {runs}", "fail" if m.group(1) else "pass"))
    return cases


# Programs whose output is not KTAP.
PARSERS = {"khugepaged": parse_khugepaged, "uffd-unit-tests": parse_uffd_unit_tests,
           "stress-ng": parse_stress_ng}


def parse_output(program: str, text: str) -> list[Case]:
    return PARSERS.get(re.sub(r"-\d+$", "", program), parse_ktap)(text)


@dataclass
class Program:
    name: str
    timeout: int
    command: str
    # Extra runs allowed when a run fails (exit code not 0): only for
    # programs seen to fail the same way on the unpatched kernel.  Every
    # run's kernel log is judged; the failed runs are kept and reported.
    retries: int = 0


@dataclass
class ProgramResult:
    program: Program
    ran: bool
    rc: int | None = None
    output: str = ""
    dmesg: str = ""
    elapsed: float = 0.0
    cases: list[Case] = field(default_factory=list)
    # Outputs of the runs that failed before the one judged here.
    failed_runs: list[str] = field(default_factory=list)
    # The guest's tasks (state, wait channel, kernel stack) when the
    # program reached its timeout; empty if it did not.
    hang: str = ""

    @property
    def timed_out(self) -> bool:
        return self.rc == 124

    @property
    def reports(self) -> list[str]:
        return vm.kernel_reports(self.dmesg)

    def failed_cases(self) -> list[Case]:
        return [c for c in self.cases if c.status == "fail"]


@dataclass
class SuiteRun:
    results: dict[str, ProgramResult]
    vm: vm.VMResult
    outdir: Path
    kernelrelease: str
    boot_dmesg: str

    def problems(self, name: str) -> list[str]:
        """Why program `name` failed, with evidence; empty if it passed.

        Failure means: it did not run or did not finish, it exited non-zero,
        a KTAP case failed, or the kernel reported a problem while it ran.
        """
        r = self.results[name]
        if not r.ran:
            return [f"{name} did not run: the guest stopped before it "
                    f"(timed out: {self.vm.timed_out}).\n{self.vm.describe()}"]
        out = []
        if r.timed_out:
            out.append(f"{name} timed out after {r.program.timeout} s")
            if r.hang:
                out.append(f"tasks at the timeout:\n{vm.tail(r.hang, 120)}")
        elif r.rc != 0:
            out.append(f"{name} exited {r.rc}")
        for c in r.failed_cases():
            out.append(f"case failed: {c.name}")
            log = case_log(r.output, c.name)
            if log:
                out.append(f"its output:\n{log}")
        if not r.cases:
            out.append(f"{name} reported no KTAP results")
        for rep in r.reports:
            out.append(f"kernel report while {name} ran:\n{rep}")
        if out:
            out.append(f"output tail:\n{vm.tail(r.output, 30)}")
        return out


def read_programs(listfile: Path, bindir: Path, timeout: int) -> list[Program]:
    """Programs of a list file: `[timeout=S] [retries=N] NAME [ARGS...]`,
    run from `bindir`."""
    progs, seen = [], {}
    for n, line in enumerate(listfile.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        words = shlex.split(line)
        opts = {"timeout": timeout, "retries": 0}
        while words and "=" in words[0]:
            key, _, val = words.pop(0).partition("=")
            if key not in opts or not val.isdigit():
                raise ValueError(f"{listfile}:{n}: unknown option '{key}={val}' "
                                 f"(known: timeout=SECONDS, retries=N)")
            opts[key] = int(val)
        if not words:
            raise ValueError(f"{listfile}:{n}: options but no program")
        base = words[0]
        seen[base] = seen.get(base, 0) + 1
        name = base if seen[base] == 1 else f"{base}-{seen[base]}"
        progs.append(Program(name, opts["timeout"],
                             shlex.join([str(bindir / base)] + words[1:]),
                             opts["retries"]))
    return progs


def fmt_seconds(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s} s" if s < 60 else f"{s // 60}:{s % 60:02d} min"


def verdict(rc: int) -> str:
    """A finished program's exit code in words (the host judges the rest)."""
    return "timed out" if rc == 124 else f"exit {rc}"


def read_number(path: Path) -> list[float] | None:
    """The numbers of a small file the guest wrote whole (NAME.rc, NAME.time);
    None while it is missing or not yet written."""
    try:
        words = path.read_text().split()
        return [float(w) for w in words] if words else None
    except (OSError, ValueError):
        return None


@dataclass
class Finished:
    name: str
    rc: int
    seconds: float


class Progress:
    """What the guest has done so far, from the files run-suite.sh leaves in
    the shared results folder as it goes: NAME.dmesg when a program starts,
    NAME.out.failedN when a run failed and is repeated, NAME.time and
    NAME.rc when it is done.  poll() returns a line per new event."""

    def __init__(self, outdir: Path, names: list[str], clock=time.monotonic):
        self.outdir, self.names, self.clock = outdir, names, clock
        self.next = 0  # the first program not seen done
        self.started: float | None = None  # when names[next] was seen started
        self.failed_runs = 0
        self.finished: list[Finished] = []

    @property
    def current(self) -> str | None:
        """The program running now, if one was seen started."""
        return self.names[self.next] if self.started is not None else None

    def poll(self) -> list[str]:
        out = []
        while self.next < len(self.names):
            name = self.names[self.next]
            tag = f"[{self.next + 1}/{len(self.names)}] {name}"
            if self.started is None:
                if not (self.outdir / f"{name}.dmesg").exists():
                    break
                self.started, self.failed_runs = self.clock(), 0
                out.append(f"{tag} ...")
            failed = len(list(self.outdir.glob(f"{name}.out.failed*")))
            if failed > self.failed_runs:
                self.failed_runs = failed
                out.append(f"{tag}: run {failed} failed, run {failed + 1} started")
            rc = read_number(self.outdir / f"{name}.rc")
            if rc is None:
                break
            t = read_number(self.outdir / f"{name}.time")
            seconds = t[1] - t[0] if t and len(t) == 2 else self.clock() - self.started
            self.finished.append(Finished(name, int(rc[0]), seconds))
            out.append(f"{tag}: {verdict(int(rc[0]))} after {fmt_seconds(seconds)}")
            self.next, self.started = self.next + 1, None
        return out


class Watch:
    """A thread that echoes a Progress's events as they happen, and calls
    `heartbeat` every `every` seconds for a line of its own."""

    def __init__(self, progress: Progress, echo: Callable[[str], None], *,
                 heartbeat: Callable[[Progress], str] | None = None, every: float = 0,
                 interval: float = 1.0):
        self.progress, self.echo, self.heartbeat, self.every = progress, echo, heartbeat, every
        self.interval = interval
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.beat = time.monotonic()

    def tick(self) -> None:
        for line in self.progress.poll():
            self.echo(line)
        if self.heartbeat and self.every and time.monotonic() - self.beat >= self.every:
            self.beat = time.monotonic()
            self.echo(self.heartbeat(self.progress))

    def _run(self) -> None:
        while not self.stopped.wait(self.interval):
            try:
                self.tick()
            except Exception as e:  # progress must never stop a run
                self.echo(f"(progress: {e})")
                return

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stopped.set()
        self.thread.join(timeout=10)
        if exc[0] is None:
            self.tick()


def printer(prefix: str) -> Callable[[str], None]:
    def echo(line: str) -> None:
        sys.stdout.write(f"{prefix}{line}\n")
        sys.stdout.flush()
    return echo


def run_suite(kernel: Path, programs: list[Program], outdir: Path, *,
              memory="4G", cpus=2, numa_nodes=2, boot_timeout=180,
              sysctls: dict[str, str] | None = None, swap: str = "zram",
              keep_thp: bool = False, root_fs: str = "9p",
              tcg_single: bool = False, stop_on_oops: bool = False,
              echo: Callable[[str], None] | None = printer("suite: "),
              heartbeat: Callable[[Progress], str] | None = None,
              heartbeat_every: float = 0) -> SuiteRun:
    """Boot `kernel` once and run `programs` in it, in order, with swap on
    `swap` ("zram" or "loop": see tests/guest/run-suite.sh), and THP on
    madvise unless `keep_thp` (then as the kernel's config set it).

    With `stop_on_oops`, the guest runs no program after one that left the
    kernel oopsed (outdir/stopped names it).

    Each program's start and result (exit code, time) go to `echo` as they
    happen (None: quiet), and a line of `heartbeat` every `heartbeat_every`
    seconds."""
    outdir.mkdir(parents=True, exist_ok=True)
    for f in outdir.iterdir():
        f.unlink()
    suite = outdir / "suite"
    lines = []
    for k, v in (sysctls or {}).items():
        lines.append(f"sysctl-{k} 30 0 sysctl -w {shlex.quote(f'{k}={v}')}")
    lines += [f"{p.name} {p.timeout} {p.retries} {p.command}" for p in programs]
    suite.write_text("\n".join(lines) + "\n")
    cmd = (f"SWAP={shlex.quote(swap)} THP={'keep' if keep_thp else 'madvise'} "
           f"{'STOP_ON_OOPS=1 ' if stop_on_oops else ''}"
           f"{TOP}/tests/guest/run-suite.sh {outdir} {suite}")
    # The guest is killed if the programs together overrun their timeouts.
    timeout = boot_timeout + sum((p.timeout + 30) * (1 + p.retries) for p in programs)
    start = time.time()
    names = [line.split(" ", 1)[0] for line in lines]
    if echo:
        echo(f"booting {kernel} for {len(names)} programs (at most {fmt_seconds(timeout)}); "
             f"results in {outdir}")
    progress = Progress(outdir, names)
    with (Watch(progress, echo, heartbeat=heartbeat, every=heartbeat_every) if echo
          else contextlib.nullcontext()):
        res = vm.run(kernel, cmd, memory=memory, cpus=cpus, numa_nodes=numa_nodes,
                     timeout=timeout, rwdirs=[outdir], log_path=outdir / "console.log",
                     root_fs=root_fs, tcg_single=tcg_single)
    results = {}
    for p in programs:
        rc_file = outdir / f"{p.name}.rc"
        if not rc_file.exists():
            results[p.name] = ProgramResult(p, ran=False)
            continue
        t = (outdir / f"{p.name}.time").read_text().split()
        output = (outdir / f"{p.name}.out").read_text(errors="replace")
        failed = [f.read_text(errors="replace")
                  for f in sorted(outdir.glob(f"{p.name}.out.failed*"))]
        hang = outdir / f"{p.name}.hang"
        results[p.name] = ProgramResult(
            p, True, int(rc_file.read_text()), output,
            (outdir / f"{p.name}.dmesg").read_text(errors="replace"),
            float(t[1]) - float(t[0]), parse_output(p.name, output), failed,
            hang.read_text(errors="replace") if hang.exists() else "")
    release_file = outdir / "kernelrelease"
    release = release_file.read_text().strip() if release_file.exists() else "unknown"
    boot = outdir / "boot.dmesg"
    run = SuiteRun(results, res, outdir, release,
                   boot.read_text(errors="replace") if boot.exists() else "")
    summary = {
        "kernelrelease": release,
        "project": vm.git_describe(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start)),
        "guest": {"memory": memory, "cpus": cpus, "numa_nodes": numa_nodes,
                  "kvm": vm.kvm_usable(), "elapsed_s": round(res.elapsed, 1),
                  "timed_out": res.timed_out},
        "skipped": sum(c.status == "skip" for r in results.values() for c in r.cases),
        "programs": {n: {"ran": r.ran, "rc": r.rc, "elapsed_s": round(r.elapsed, 1),
                         "failed_runs": len(r.failed_runs),
                         "cases": {c.name: c.status for c in r.cases},
                         "skipped": sum(c.status == "skip" for c in r.cases),
                         "kernel_reports": len(r.reports) if r.ran else None}
                     for n, r in results.items()},
    }
    (outdir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return run
