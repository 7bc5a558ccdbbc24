# SPDX-License-Identifier: GPL-2.0
"""make soak: the randomized tests of the suite, for as long as asked.

Boots one guest kernel (build/debug by default; `--kernel kasan` boots
build/kasan, `make soak KERNEL=kasan`; `make soak KERNEL=deb` the package
of make deb, with Debian's walkers acting as in make test-deb's second
boot: KSM merging every program's memory, DAMON paging it out, MGLRU aging,
proactive reclaim, THP always, two NUMA nodes) once and runs fork_stress (pins, NUMA
migration, KSM; a memory cgroup with swap; injected allocation failures),
stress-ng's memory stressors and the Redis digest check, every fork
asynchronous, the time split between them.  Judged as the suite judges a
program: exit code, KTAP cases, and no kernel report in the log; a
skipped case fails it unless asyncfork.skips says why for this kernel;
and a fork_stress run that expected asynchronous forks (-a) fails if
Async-fork deferred nothing in it.

Every soak ends by writing one JSON record, BUILD/results/soak-KERNEL-DATE.json
(asyncfork.results' metadata, then make_record()'s fields), whether it passed
or not; a record worth keeping is committed under docs/results/.

Swap is on zram by default, as in the suite: its swap-ins may skip the
swap cache, the path where 6.12 lost pages (docs/findings/madv-free-swapin.md,
fixed by kernel/patches/mm-fixes); `--swap loop` swaps to a loop device.
No program is repeated: any failed run is a failure.
"""

import argparse
import re
import sys
import time
from pathlib import Path

from asyncfork import package, profiles, programs, results, skips
from asyncfork import suite as harness
from asyncfork.paths import BUILD, RESULTS
from asyncfork.results import machine

RECORD_DIR = RESULTS

# Program timeouts (and the boot's) are multiplied by this for a kernel
# profile that runs the kernel's side slower: sanitizers under emulation.
TIMEOUT_FACTOR = {"kasan": 2.0, "kcsan": 3.0}

# fork_stress's per-run counters (the parent's forks, how many of them
# deferred page tables, and /proc/vmstat deltas; -1 where it could not read
# a counter), printed with or without KTAP's "# ", e.g.
#   fork_stress: forks 290, deferred 261 (90%), syncs 1204, child copies 5230, errors 0
COUNTERS_RE = re.compile(
    r"^(?:#\s*)?fork_stress: forks (?P<forks>-?\d+), deferred (?P<deferred>-?\d+) "
    r"\((?P<pct>-?\d+(?:\.\d+)?)%\), syncs (?P<syncs>-?\d+), "
    r"child copies (?P<copies>-?\d+), errors (?P<errors>-?\d+)\s*$", re.M)
# fork_stress's first KTAP result: how many children it reaped and judged
# (each compared its snapshot; with -F some were killed by a failed copy):
#   ok 1 snapshots exact: 290 children (3 killed by a failed copy, 0 forks failed)
#   not ok 1 snapshots exact: 2 of 57 children found a difference
CHILDREN_RE = re.compile(
    r"^(?:not )?ok \d+ snapshots exact: (?:(?P<bad>\d+) of )?(?P<n>\d+) children"
    r"(?: \((?P<killed>\d+) killed by a failed copy)?", re.M)

COUNTER_FIELDS = ("forks", "forks_deferred", "syncs", "child_copies", "errors")


# The timed programs of programs.stress_programs() and how many times their
# seconds each takes (stress-ng runs two stressors in turn).
TIMED = ("fork_stress", "fork_stress_memcg", "fork_stress_faults", "stress-ng")
TIME_SHARES = {"stress-ng": 2}
# Left out on a kernel without fault injection (the package's).
NO_FAULT_INJECTION = {"fork_stress_faults"}


def soak_programs(minutes: float, packaged: bool) -> tuple[int, int, list[harness.Program]]:
    """(seconds per timed program, Redis snapshots, the programs) of a soak
    of @minutes.  The timed programs share all of the time (stress-ng runs
    two stressors one after the other: two shares), so that a soak of N
    minutes lasts at least N; Redis's snapshots (about 40 s each under
    emulation, a tenth of the time) come on top.  Debian's config has no
    fault injection (CONFIG_FAULT_INJECTION is not set), so the package
    runs without fork_stress_faults, which would only bail out."""
    skip = NO_FAULT_INJECTION if packaged else set()
    shares = sum(TIME_SHARES.get(n, 1) for n in TIMED if n not in skip)
    seconds = max(30, -(-int(minutes * 60) // shares))
    snapshots = max(2, int(minutes * 60 * 0.1 / 40 / 4))
    progs = [p for p in programs.stress_programs(seconds, snapshots) if p.name not in skip]
    return seconds, snapshots, progs


def parse_fork_stress(text: str) -> dict:
    """The counters of one fork_stress run's output; None where the run
    did not print them (the last line of each kind counts)."""
    out = dict.fromkeys(COUNTER_FIELDS + ("children_checked", "children_killed"))
    m = None
    for m in COUNTERS_RE.finditer(text):
        pass
    if m:
        for key, group in zip(COUNTER_FIELDS, ("forks", "deferred", "syncs", "copies", "errors")):
            val = int(m[group])
            out[key] = val if val >= 0 else None
    m = None
    for m in CHILDREN_RE.finditer(text):
        pass
    if m:
        out["children_checked"] = int(m["n"])
        if m["killed"] is not None:
            out["children_killed"] = int(m["killed"])
    return out


def total(runs: list[dict], key: str) -> int | None:
    """The sum of @key over @runs; None if any run lacks it (a partial sum
    would look like a whole one) or there is no run."""
    vals = [r[key] for r in runs]
    return None if not vals or None in vals else sum(vals)


def is_fork_stress(p: harness.Program) -> bool:
    return Path(programs.last_command(p.command)[0]).name == "fork_stress"


def expects_async(p: harness.Program) -> bool:
    """fork_stress -a: every fork of the run must be asynchronous."""
    return "-a" in programs.last_command(p.command)[1:]


def fork_stress_runs(run: harness.SuiteRun, progs: list[harness.Program]) -> list[dict]:
    """One entry per fork_stress run of the boot, failed and repeated runs
    included: program, which run, whether it expected Async-fork, counters."""
    runs = []
    for p in progs:
        r = run.results.get(p.name)
        if not is_fork_stress(p) or r is None or not r.ran:
            continue
        for i, text in enumerate(r.failed_runs + [r.output], 1):
            runs.append({"program": p.name, "run": i, "expect_async": expects_async(p),
                         **parse_fork_stress(text)})
    return runs


def judge(run: harness.SuiteRun, progs: list[harness.Program],
          runs: list[dict], config: str = "") -> dict[str, list[str]]:
    """The problems of each program: the suite's judgement, a skipped case
    that asyncfork.skips does not allow on @config (with none, no skip is
    allowed), and, for a fork_stress run that expected Async-fork, a run
    that deferred nothing."""
    problems = {p.name: skips.verdict(run, p.name, config) for p in progs}
    for s in runs:
        if s["expect_async"] and s["forks_deferred"] == 0:
            problems[s["program"]].append(
                f"{s['program']} (run {s['run']}): Async-fork deferred nothing in "
                f"{s['forks']} forks, but the run expected asynchronous forks (-a)")
    return problems


def print_judgement(prefix: str, run: harness.SuiteRun, progs: list[harness.Program],
                    problems: dict[str, list[str]], config: str = "") -> None:
    """One line per program, pass or FAIL, with its cases and skips, then
    its problems, the reasons of its allowed skips and the tails of its
    repeated runs."""
    skipped = skips.program_skips(run, [p.name for p in progs], config)
    for p in progs:
        r = run.results[p.name]
        s = skipped.get(p.name, skips.Skips())
        print(f"{prefix}{p.name}: {'FAIL' if problems[p.name] else 'pass'} ({r.elapsed:.0f} s, "
              f"{len(r.cases)} cases, {s.count} skipped)")
        for line in problems[p.name]:
            print("    " + line.replace("\n", "\n    "))
        for case, why in s.allowed:
            print(f"    skipped {case}: {why}")
        for i, failed_out in enumerate(r.failed_runs, 1):
            print(f"    run {i} failed and was repeated; its output tail:\n      " +
                  harness.vm.tail(failed_out, 20).replace("\n", "\n      "))


def make_record(*, kernel_name: str, kernel_dir: Path, run: harness.SuiteRun,
                progs: list[harness.Program], problems: dict[str, list[str]],
                runs: list[dict], started: float, finished: float,
                machine_info: dict, argv: list[str], args: dict,
                image: Path | None = None, built: dict | None = None,
                config: str | None = None) -> dict:
    """The soak's record.  Counters are sums over every fork_stress run
    (failed and repeated runs included), null if a run did not print them.
    forks, forks_deferred, syncs (tables the parent copied first) and
    child_copies (tables the child copied) come from fork_stress's counter
    line; children_checked from its "snapshots exact: N children" result.
    skipped counts the skipped cases, each program's allowed ones with
    their reason (asyncfork.skips, for @config: ARCH/KERNEL_NAME)."""
    config = config or skips.config(kernel_name)
    skipped = skips.program_skips(run, [p.name for p in progs], config)
    kernel = results.kernel(None if image else kernel_dir, label=kernel_name, image=image,
                            async_fork="2 (each program sets it)")
    if run.kernelrelease != "unknown":
        kernel["release"] = run.kernelrelease
    # Which build: a kernel is not rebuilt for a soak of a later commit
    # whose kernel code is the same, so the record names the image's
    # build time and, for the package, its file.
    kernel.update(built or {})
    return {
        **results.metadata("soak", kernels=[kernel], machine_info=machine_info, argv=argv,
                           args=args, started=started),
        "seconds": round(finished - started, 1),
        **{k: total(runs, k) for k in COUNTER_FIELDS},
        "children_checked": total(runs, "children_checked"),
        "kernel_reports": len(run.vm.reports or []),
        "skip_config": config,
        "skipped": sum(s.count for s in skipped.values()),
        "skipped_unexplained": sum(len(s.unexplained) for s in skipped.values()),
        "failures": sum(bool(v) for v in problems.values()),
        "passed": not any(problems.values()) and not run.vm.reports,
        "programs": {
            p.name: {"passed": not problems[p.name],
                     "seconds": round(run.results[p.name].elapsed, 1),
                     "repeated_runs": len(run.results[p.name].failed_runs),
                     **skips.record(skipped.get(p.name, skips.Skips())),
                     "problems": [s.splitlines()[0] for s in problems[p.name]]}
            for p in progs},
        "fork_stress_runs": runs,
    }


def mmss(seconds: float) -> str:
    return f"{int(seconds) // 60}:{int(seconds) % 60:02d}"


def heartbeat_line(progress: harness.Progress, outdir: Path, elapsed: float, minutes: float,
                   fork_stress: set[str] | None = None) -> str:
    """The soak's heartbeat: time, the program running, programs done and
    how many exited non-zero, the counters of the fork_stress runs done so
    far and the kernel reports in the console log so far."""
    n = len(progress.names)
    running = (f"{progress.current} running "
               f"({harness.fmt_seconds(progress.clock() - progress.started)})"
               if progress.current else "between programs" if progress.finished else "booting")
    bad = sum(f.rc != 0 for f in progress.finished)
    runs = []
    for f in progress.finished:
        if f.name in fork_stress if fork_stress is not None else f.name.startswith("fork_stress"):
            try:
                runs.append(parse_fork_stress((outdir / f"{f.name}.out").read_text(
                    errors="replace")))
            except OSError:
                runs.append(parse_fork_stress(""))
    if runs:
        def count(key):
            v = total(runs, key)
            return "?" if v is None else v
        counters = (f"fork_stress so far: forks {count('forks_deferred')} of "
                    f"{count('forks')} deferred, {count('children_checked')} children checked")
    else:
        counters = "no fork_stress run done yet"
    try:
        reports = len(harness.vm.kernel_reports(
            (outdir / "console.log").read_text(errors="replace")))
    except OSError:
        reports = 0
    return (f"heartbeat {mmss(elapsed)} of about {mmss(minutes * 60)}: {running}, "
            f"{len(progress.finished)} of {n} done, {bad} exited non-zero; "
            f"{counters}; kernel reports {reports}")


DPKG_STATUS = Path("/var/lib/dpkg/status")


def packages_stamp(status: Path = DPKG_STATUS) -> float | None:
    """When the host's package database last changed (None without dpkg)."""
    try:
        return status.stat().st_mtime
    except OSError:
        return None


def host_changed_note(before: float | None, after: float | None) -> str | None:
    """Why a run is suspect if the host's packages changed while it ran:
    the guest sees the host's root, and a program it starts after an
    upgrade can load a replaced library through a stale view of it (the
    KASAN soak of 2026-11-26: stress-ng and python segfaulted in ld.so an
    hour after an apt run on the host)."""
    if before is None or after is None or before == after:
        return None
    return (f"the host's packages changed during the run ({DPKG_STATUS} modified at "
            f"{results.utc(after)}): a program the guest started later may have loaded a "
            f"replaced library; run again with the host left alone")


def write_record(record: dict, outdir: Path, kernel_name: str, kind: str = "soak") -> Path:
    """Write @record as KIND-KERNEL-DATE.json in @outdir (DATE from its
    start, UTC); a later run of the same day gets -2, -3...: none is lost."""
    return results.write(record, outdir, f"{kind}-{kernel_name}")


def kernel_dir(name: str) -> Path:
    """--kernel NAME is build/NAME; a value with a slash is a folder."""
    return Path(name) if "/" in name else BUILD / name


def unknown_kernel(name: str) -> str | None:
    """Why --kernel NAME names no kernel: not deb, no folder (a slash) and
    no profile of kernel/configs/profiles; None if it does."""
    known = profiles.names()
    if name == "deb" or "/" in name or name in known:
        return None
    return (f"--kernel {name}: not a profile of kernel/configs/profiles "
            f"({', '.join(known)}), deb, or a build folder (with a slash)")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30,
                    help="total run time of the programs (default 30)")
    ap.add_argument("--kernel", default="debug",
                    help="kernel profile NAME of kernel/configs/profiles, booted from "
                         "build/NAME (default debug; kasan, kcsan, lean, ...), a build "
                         "folder (with a slash), or deb: the "
                         "package make deb built (--flavour), with Debian's walkers "
                         "acting as in make test-deb's second boot")
    ap.add_argument("--flavour", default="cloud-amd64",
                    help="with --kernel deb: the package's flavour (default cloud-amd64)")
    ap.add_argument("--memory", default="4G")
    ap.add_argument("--cpus", type=int, default=3)
    ap.add_argument("--swap", choices=("loop", "zram"), default="zram",
                    help="swap device of the guest (default zram)")
    ap.add_argument("--timeout-factor", type=float, default=None,
                    help="multiply program timeouts by this (default 2 for kasan, "
                         "3 for kcsan, else 1)")
    ap.add_argument("--tcg-single", action=argparse.BooleanOptionalAction, default=None,
                    help="under TCG, run every vCPU on one host thread (default: only "
                         "with --kernel deb; QEMU 7.2's multi-threaded TCG can corrupt "
                         "a static-key switch, see tests/repro/cfs_key_toggle.sh)")
    ap.add_argument("--heartbeat", type=float, default=120, metavar="SECONDS",
                    help="print the soak's counters this often (default 120; 0: never)")
    ap.add_argument("--record-dir", default=str(RECORD_DIR),
                    help="where the JSON record goes (default BUILD/results)")
    a = ap.parse_args(argv)
    if a.minutes <= 0:
        ap.error("--minutes must be positive")
    if why := unknown_kernel(a.kernel):
        ap.error(why)
    packaged = a.kernel == "deb"
    tcg_single = packaged if a.tcg_single is None else a.tcg_single
    image = None
    if packaged:
        debs = BUILD / "debs" / a.flavour
        try:
            deb = package.find_package(debs)
        except SystemExit as e:
            print(f"soak: {e}", file=sys.stderr)
            return 2
        image = package.unpack(deb, BUILD / "test-deb" / a.flavour)
        kdir, name = image, f"deb-{a.flavour}"
    else:
        kdir = kernel_dir(a.kernel)
        name = kdir.name
    factor = a.timeout_factor or TIMEOUT_FACTOR.get(name, 1.0)
    if factor < 1:
        ap.error("--timeout-factor must be at least 1")
    try:
        built_image = harness.vm.find_image(kdir)
    except harness.vm.VMError as e:
        print(f"soak: {e} (make soak KERNEL={a.kernel})", file=sys.stderr)
        return 2
    built = {"image_built": time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime(Path(built_image).stat().st_mtime))}
    if packaged:
        built["package"] = deb.name
    seconds, snapshots, progs = soak_programs(a.minutes, packaged)
    for p in progs:
        p.timeout = int(p.timeout * factor)
    for p in progs:
        p.retries = 0
    missing = programs.missing(progs)
    if missing:
        print(f"soak: not built: {', '.join(missing)}: run 'make soak'", file=sys.stderr)
        return 2
    if packaged:
        # Debian's defaults (THP always, MGLRU, NUMA balancing), and the
        # walkers acting on every program's memory: KSM merging it, DAMON
        # paging it out, MGLRU aging and proactive reclaim (pressure).
        walkers = package.GUEST / "walkers.sh"
        progs = ([package.cfs_bandwidth_on(), harness.Program("walkers_on", 60, f"{walkers} on")]
                 + [package.under_ksm(p) for p in progs]
                 + [harness.Program("walkers_check", 60, f"{walkers} check")])
    out = BUILD / "results/soak"
    print(f"soak: {name} kernel, {seconds} s per stress program, "
          f"{snapshots} Redis snapshots per configuration, swap on {a.swap}; "
          f"results in {out}", flush=True)
    start = time.time()
    stamp = packages_stamp()
    # Single-threaded TCG: see vm.run's tcg_single.
    extra = {"keep_thp": True, "root_fs": "virtiofs"} if packaged else {}
    fork_stress = {p.name for p in progs if is_fork_stress(p)}
    run = harness.run_suite(kdir, progs, out, memory=a.memory, cpus=a.cpus,
                            numa_nodes=2, swap=a.swap, boot_timeout=int(180 * factor),
                            tcg_single=tcg_single, echo=harness.printer("soak: "),
                            heartbeat=lambda p: heartbeat_line(p, out, time.time() - start,
                                                               a.minutes, fork_stress),
                            heartbeat_every=a.heartbeat, **extra)
    finished = time.time()
    host_note = host_changed_note(stamp, packages_stamp())
    runs = fork_stress_runs(run, progs)
    config = skips.config(name)
    problems = judge(run, progs, runs, config)
    print_judgement("soak: ", run, progs, problems, config)
    for s in runs:
        if s["forks"] is None:
            print(f"soak: {s['program']} (run {s['run']}) printed no counter line "
                  f"('fork_stress: forks N, deferred D (P%), ...'): counters recorded as null")
    failed = sum(bool(v) for v in problems.values())
    reports = run.vm.reports or []
    if reports:
        print("soak: kernel reports in the console log:\n" + "\n\n".join(reports))
    swaps = out / "swaps"
    if swaps.exists():
        print("soak: guest swap:\n    " + swaps.read_text().strip().replace("\n", "\n    "))
    record = make_record(kernel_name=name, kernel_dir=kdir, run=run, progs=progs, built=built,
                         problems=problems, runs=runs, started=start, finished=finished,
                         machine_info=machine(a.cpus, a.memory, 2, a.swap, tcg_single=tcg_single),
                         argv=argv, args={**vars(a), "timeout_factor": factor,
                                          "tcg_single": tcg_single,
                                          "seconds_per_program": seconds,
                                          "redis_snapshots": snapshots},
                         image=image, config=config)
    record["host_packages_changed"] = host_note is not None
    if host_note:
        print(f"soak: warning: {host_note}")
    path = write_record(record, Path(a.record_dir), name)
    print(f"soak: {len(progs) - failed} of {len(progs)} programs passed in "
          f"{(finished - start) / 60:.1f} min ({run.kernelrelease}); "
          f"forks {record['forks']}, deferred {record['forks_deferred']}, "
          f"children checked {record['children_checked']}, cases skipped "
          f"{record['skipped']} ({record['skipped_unexplained']} with no reason); record {path}")
    return 1 if failed or reports else 0


if __name__ == "__main__":
    sys.exit(main())
