# SPDX-License-Identifier: GPL-2.0
"""Boot a built guest kernel under virtme-ng, run one command, judge the log.

This is the whole boot layer of the harness: a thin wrapper over `vng --run`
that adds what a test runner needs and vng does not give:

  * KVM when /dev/kvm is usable, TCG otherwise;
  * a hard timeout: a hung guest is killed and reported, never waited on;
  * the serial console (the kernel log, including a panic) saved to a file;
  * a scan of that log for kernel reports (WARN, BUG, oops, lockdep, RCU
    stalls, hung tasks, lockups, KASAN, KFENCE...): any report fails the run.

Used as a module by the tests and the benchmarks, and as a command:

    asyncfork vm --kernel build/debug [--memory 4G] [--cpus 2] -- CMD...

(make vm runs it as `python -m asyncfork vm`; so does scripts/vm.py, the
path older records name.)
"""

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from asyncfork import entry, paths
from asyncfork.paths import ARCH, BUILD, TOP, arch_dir


# Lines that start a kernel report, as the 6.12 kernel prints them.  Each
# one fails a run, whatever the command inside the guest printed.  Every
# pattern is anchored at the start of the message (after its timestamp),
# so that a program's output that quotes one, or a user-space fault that
# the kernel logs ("traps: prog[1] general protection fault ip:..."), is
# no report.  tests/test_kernel_banners.py feeds each banner as printed.
REPORT_PATTERNS = [
    # WARN() and BUG() (kernel/panic.c __warn(), lib/bug.c), oopses
    # (arch/x86/kernel/dumpstack.c "Oops: ...", arm64's die() "Internal
    # error: Oops...", its die_kernel_fault()), panic().  "BUG: " also
    # starts the reports of KASAN, KCSAN and KFENCE, of bad pages and rss
    # counters (mm/page_alloc.c, mm/memory.c, kernel/fork.c), sleeping in
    # atomic context (kernel/sched/core.c), spinlock debugging, the soft
    # lockup detector ("watchdog: BUG: soft lockup - CPU#1 stuck for 22s!",
    # kernel/watchdog.c) and lockdep's running out of entries (lockdep.c);
    # page_table_check reports through BUG_ON() alone.
    r"WARNING: CPU: \d+ PID: \d+ at ",
    r"------------\[ cut here \]------------",
    r"kernel BUG at ",
    r"(?:watchdog: )?BUG: ",
    r"Oops: ",
    r"Internal error: ",
    r"Unable to handle kernel ",
    r"Kernel panic - not syncing",
    # SLUB's own checks (mm/slub.c slab_bug(): "BUG kmalloc-64 (Not
    # tainted): Poison overwritten").
    r"BUG \S+ \([^)]*\): ",
    # lockdep (kernel/locking/lockdep.c; lockdep_proc.c prints no report):
    # every banner it prints between its "====" lines, the RCU checker's
    # lockdep_rcu_suspicious() included, and a lock it cannot register.
    r"WARNING: (?:possible circular locking dependency detected"
    r"|\S+-safe -> \S+-unsafe lock order detected"
    r"|possible recursive locking detected"
    r"|chain_key collision"
    r"|inconsistent lock state"
    r"|possible irq lock inversion dependency detected"
    r"|Nested lock was not taken"
    r"|bad unlock balance detected!"
    r"|bad contention detected!"
    r"|held lock freed!"
    r"|.+/\d+ still has locks held!"
    r"|lock held when returning to user space!"
    r"|suspicious RCU usage)",
    r"\[ BUG: Invalid wait context \]",
    r"INFO: trying to register non-static key",
    # RCU stalls (kernel/rcu/tree_stall.h, tree_exp.h with "rcu: " from
    # tree.c; tasks.h): normal, self-detected, expedited, RCU-tasks.
    r"(?:rcu: )?INFO: \S+ (?:self-)?detected (?:expedited )?stall",
    # A callback queued twice (kernel/rcu/tree.c __call_rcu_common()).
    r"(?:rcu: )?\S+\(\): Double-freed CB ",
    # Hung tasks (kernel/hung_task.c) and hard lockups (kernel/watchdog.c).
    r"INFO: task .+:\d+ blocked for more than \d+ seconds",
    r"watchdog: Watchdog detected hard LOCKUP",
    # "BUG: KASAN: slab-use-after-free in ...", "BUG: KCSAN: data-race in
    # ...", and the "KASAN: null-ptr-deref in range [...]" note of a general
    # protection fault.  Their boot lines start in lower case ("kasan: ",
    # "kcsan: ", "kfence: ") and are no reports.
    r"KASAN: ",
    r"KCSAN: ",
    r"KFENCE: ",
    r"UBSAN: ",
    # The global OOM killer (mm/oom_kill.c); a memory cgroup's ("Memory
    # cgroup out of memory: Killed process") is what the tests provoke.
    r"Out of memory: Killed process",
]
REPORT_RE = re.compile("^(?:" + "|".join(f"(?:{p})" for p in REPORT_PATTERNS) + ")")
# Benign lines that match a pattern above.
REPORT_ALLOW = [
    re.compile(r"KFENCE: initialized"),
]
# A kernel log line's timestamp (CONFIG_PRINTK_TIME) and caller
# (CONFIG_PRINTK_CALLER), at its start or after output that a program
# wrote to the console without a newline.
TIMESTAMP_RE = re.compile(r"^(?:.*?)\[\s*\d+\.\d+\](?:\[\s*[TC]\d+\])?\s?")
# The line of "=" above a report: 66 of them for KASAN, KCSAN, KFENCE,
# UBSAN; lockdep's are as long as their banner, at least 25.
SEPARATOR_RE = re.compile(r"^={25,}$")


class VMError(Exception):
    """Bad input to the harness: a one-line message that says what to do."""


@dataclass
class VMResult:
    returncode: int | None  # exit code of the guest command; None if killed
    timed_out: bool
    elapsed: float
    console: str  # serial console: kernel log and the command's output
    log_path: Path
    reports: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.timed_out and self.returncode == 0 and not self.reports

    def describe(self) -> str:
        """A failure message with the evidence: what failed and an excerpt."""
        parts = []
        if self.timed_out:
            parts.append(f"guest killed after {self.elapsed:.0f} s timeout; "
                         f"console tail:\n{tail(self.console, 40)}")
        elif self.returncode != 0:
            parts.append(f"guest command exited {self.returncode}; "
                         f"console tail:\n{tail(self.console, 40)}")
        for r in self.reports:
            parts.append("kernel report:\n" + r)
        parts.append(f"full console log: {self.log_path}")
        return "\n\n".join(parts)


def tail(text: str, n: int) -> str:
    return "\n".join(text.splitlines()[-n:])


def kernel_reports(log: str, context: int = 40) -> list[str]:
    """Excerpts of every kernel report in a kernel log, one per report."""
    lines = [TIMESTAMP_RE.sub("", line) for line in log.splitlines()]
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        if REPORT_RE.search(line) and not any(a.search(line) for a in REPORT_ALLOW):
            end = min(i + context, len(lines))
            # KASAN, KCSAN, KFENCE, UBSAN and lockdep open each report with a
            # line of "=": one that starts inside this excerpt is a report of
            # its own.
            for j in range(i + 1, end - 1):
                if SEPARATOR_RE.match(lines[j]) and REPORT_RE.search(lines[j + 1]):
                    end = j
                    break
            out.append("\n".join(lines[i:end]))
            i = end
        else:
            i += 1
    return out


def parse_size(s: str) -> int:
    m = re.fullmatch(r"(\d+)([KMGT]?)", s.strip().upper())
    if not m:
        raise VMError(f"memory size '{s}' is not a size like 4G or 2048M")
    return int(m.group(1)) << {"": 20, "K": 10, "M": 20, "G": 30, "T": 40}[m.group(2)]


def meminfo(key: str) -> int:
    """A /proc/meminfo value of this machine, bytes."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(f"{key}:"):
                return int(line.split()[1]) << 10
    raise VMError(f"cannot read {key} from /proc/meminfo")


def host_available() -> int:
    return meminfo("MemAvailable")


def default_memory(need_mb: int) -> str:
    """Guest memory for a run that needs need_mb MiB: that, within 60% of
    the host's available memory, and at least 2 GiB."""
    have = int(host_available() * 0.6) >> 20
    return f"{max(2048, min(need_mb, have))}M"


def sizing(need_mb: int, *, on_machine: bool, memory: str | None = None,
           slack_mb: int = 512) -> tuple[str, int]:
    """(memory, MiB the run has) of a run that needs need_mb MiB: natively
    this machine's total memory (what its record says) and its available
    memory; in a guest `memory`, or default_memory() with slack_mb of slack,
    and its size.  Raises VMError for a memory that is no size."""
    if on_machine:
        return f"{meminfo('MemTotal') >> 20}M", host_available() >> 20
    memory = memory or default_memory(need_mb + slack_mb)
    return memory, parse_size(memory) >> 20


def fit_place(on_machine: bool, have_mb: int) -> str:
    """Where a run that does not fit would have run, for its message."""
    return (f"this machine's {have_mb} MiB of available memory" if on_machine
            else f"a {have_mb} MiB guest")


def kvm_usable() -> bool:
    """KVM only with hardware virtualization: on these machines /dev/kvm can
    exist without vmx/svm, and a guest started on it hangs silently.
    ASYNC_FORK_ACCEL=kvm or tcg overrides the guess.  A guest of another
    architecture (ARCH=arm64 on an x86 host) is always emulated."""
    if foreign():
        return False
    forced = os.environ.get("ASYNC_FORK_ACCEL")
    if forced in ("kvm", "tcg"):
        return forced == "kvm"
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return bool({"vmx", "svm"} & set(line.split()))
    return False


def accel_args(tcg_single: bool = False) -> list[str]:
    """vng's arguments for how the guest's CPUs run: KVM if usable, else
    TCG, with every vCPU on one host thread if `tcg_single` (see run())."""
    if kvm_usable():
        return []
    # One argument: vng would take a separate "-accel ..." for an option.
    return ["--disable-kvm"] + (["--qemu-opts=-accel tcg,thread=single"] if tcg_single else [])


IMAGES = {"x86": "arch/x86/boot/bzImage", "arm64": "arch/arm64/boot/Image"}
ARM64_ROOT = BUILD / "arm64-root"
# QEMU's "max" CPU, with the cheaper pointer-authentication algorithm
# (QARMA5 dominates the emulated CPU's time otherwise).
ARM64_CPU = "-cpu max,pauth-impdef=on"


def find_image(kernel: Path, guest_arch: str | None = None) -> Path:
    guest_arch = guest_arch or ARCH
    kernel = Path(kernel)
    img = kernel / IMAGES[guest_arch] if kernel.is_dir() else kernel
    if not img.is_file():
        make_arch = "" if guest_arch == "x86" else f" ARCH={guest_arch}"
        raise VMError(f"no kernel image at {img}: build it first "
                      f"(make kernel-debug{make_arch} or make kernel-lean{make_arch})")
    return img


foreign = paths.foreign


def arch_args(guest_arch: str, root: Path | None = None, shared=()) -> list[str]:
    """vng's arguments for a guest of another architecture: emulated, on
    the root filesystem of scripts/setup-arm64.sh, with the host folders
    `shared` (the checkout, the build folder) mounted read-write at the
    same paths, so that a guest command finds what the host built.  None
    for the host's own architecture, whose guests see the host's root."""
    if not foreign(guest_arch):
        return []
    root = ARM64_ROOT if root is None else root
    if not (root / "etc/asyncfork-arm64-root").is_file():
        raise VMError(f"no arm64 root filesystem in {root}: run 'make arm64-root ARCH=arm64'")
    args = ["--arch", guest_arch, "--root", str(root), f"--qemu-opts={ARM64_CPU}"]
    for d in shared:
        # virtme-init mounts there; the root is read-only to the guest.
        try:
            (root / Path(d).relative_to("/")).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise VMError(f"cannot make the mount point of {d} in {root} ({e.strerror}): "
                          f"run 'make arm64-root' as the user who made the root") from None
        args += ["--rwdir", f"{d}={d}"]
    return args


def check_root(build: Path = BUILD) -> None:
    """Raises VMError unless scripts/setup-arm64.sh --check finds the arm64
    root as it would make it now (a root made from an older package list
    lacks what the harness runs there)."""
    p = subprocess.run([str(TOP / "scripts/setup-arm64.sh"), "--check", str(build)],
                       capture_output=True, text=True, check=False)
    if p.returncode != 0:
        why = (p.stderr.strip().splitlines() or ["setup-arm64.sh --check failed"])[-1]
        raise VMError(f"{why.removeprefix('setup-arm64: ')}: run 'make arm64-root'")


def kernel_release(kernel: Path) -> str:
    f = Path(kernel) / "kernelrelease"
    return f.read_text().strip() if f.is_file() else "unknown"


def git_describe() -> str:
    """The project's revision, recorded with every result."""
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=TOP,
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def vng_binary() -> str:
    venv = TOP / ".venv/bin/vng"
    if venv.exists():
        return str(venv)
    found = shutil.which("vng")
    if not found:
        raise VMError("virtme-ng (vng) not found: run 'make setup'")
    return found


TOOLS = BUILD / "tools/bin"


def root_fs_args(root_fs: str) -> list[str]:
    """vng's arguments for how the guest sees the host's root: over 9p,
    or over virtio-fs, whose daemon must be found first."""
    if root_fs == "9p":
        return ["--force-9p"]
    if root_fs == "virtiofs":
        if not shutil.which("virtiofsd", path=f"{TOOLS}:{os.environ.get('PATH', '')}"):
            raise VMError("virtiofsd not found: this kernel has no 9p, and its guest needs "
                          f"virtiofsd (make virtiofsd builds it into {TOOLS})")
        return []
    raise VMError(f"root_fs must be 9p or virtiofs, not '{root_fs}'")


def run(kernel, command: str, *, memory: str = "2G", cpus: int = 2,
        timeout: float = 600, numa_nodes: int = 1, rwdirs=(), append=(),
        log_path: Path | None = None, echo: bool | str = False,
        root_fs: str = "9p", tcg_single: bool = False, qemu_opts=()) -> VMResult:
    """Boot `kernel` (an image or a build folder), run `command`, stop.

    The command runs as root with the host's root filesystem visible
    read-only (writes go to a throw-away overlay), except for `rwdirs`.
    `root_fs` is how the guest sees it: "9p" (the project's kernels), or
    "virtiofs" for a kernel without 9p (Debian's cloud flavour), which
    needs virtiofsd (the Rust one) on PATH or in BUILD/tools/bin.
    `echo` copies the console to stdout as it comes: all of it if True,
    only the lines that start with it if a string (progress lines).
    `tcg_single` runs all vCPUs of a TCG guest on one host thread (no
    effect under KVM): Debian's 6.12 kernels can oops with int3 at a
    static-key site under multi-threaded TCG (docs/findings/
    distro-kernel-test-deb.md, section 1).  `qemu_opts` go to QEMU last
    (a later -cpu replaces an earlier one).
    """
    mem = parse_size(memory)
    avail = host_available()
    if mem > avail:
        raise VMError(f"guest memory {memory} is larger than the host's "
                      f"available {avail >> 30} GiB: pass a smaller memory size")
    if cpus < 1:
        raise VMError(f"cpus must be at least 1, not {cpus}")
    fs_args = root_fs_args(root_fs)
    image = find_image(kernel)
    args = [vng_binary(), "--run", str(image), "--memory", f"{mem >> 20}M",
            "--cpus", str(cpus), "--verbose", "--user", "root"] + fs_args
    tools = TOOLS
    if foreign():
        check_root()
    args += arch_args(ARCH, shared=[TOP] + ([] if BUILD.is_relative_to(TOP) else [BUILD]))
    args += accel_args(tcg_single)
    if numa_nodes > 1:
        per = mem // numa_nodes >> 20
        if per * numa_nodes != mem >> 20:
            raise VMError(f"memory {memory} does not divide into {numa_nodes} NUMA nodes")
        # One socket per CPU: CPUs that share a last-level cache across
        # nodes make the guest kernel WARN about its topology at boot.
        args += ["--qemu-opts", f"-smp {cpus},sockets={cpus},cores=1,threads=1"]
        for n in range(numa_nodes):
            first = n * cpus // numa_nodes
            last = max(first, (n + 1) * cpus // numa_nodes - 1)
            args += ["--numa", f"{per}M,cpus={first}-{last}"]
    for d in rwdirs:
        # Another architecture's root is not /: say where the guest sees it
        # (the same absolute path; a relative one would be the root's).
        d = (TOP / d).resolve()  # vng runs in the checkout
        args += ["--rwdir", f"{d}={d}" if foreign() else str(d)]
    for a in append:
        args += ["--append", a]
    for o in qemu_opts:
        args.append(f"--qemu-opts={o}")
    # The command reaches the guest through the kernel command line, which
    # is limited to 2 KiB: pass a script on the shared root file system.
    script_dir = BUILD / "vm"
    script_dir.mkdir(parents=True, exist_ok=True)
    fd, script = tempfile.mkstemp(prefix="cmd-", suffix=".sh", dir=script_dir)
    with os.fdopen(fd, "w") as f:
        # vng starts an x86 guest's command in the host's directory, another
        # architecture's in its root's /: start both in the checkout.
        f.write((f"cd {shlex.quote(str(TOP))} || exit 1\n" if foreign() else "") + command + "\n")
    args += ["--exec", f"bash {script}"]

    if log_path is None:
        fd, name = tempfile.mkstemp(prefix="vm-", suffix=".log")
        os.close(fd)
        log_path = Path(name)
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)

    # vng runs its sibling virtme-run: put its folder first on PATH.
    env = dict(os.environ,
               PATH=f"{Path(args[0]).parent}:{tools}:{os.environ.get('PATH', '')}")
    start = time.monotonic()
    timed_out = False
    with open(log_path, "wb") as log:
        # Its own process group, so that a timeout kills QEMU and all that
        # vng started; a thread copies the console to the log as it comes.
        p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, start_new_session=True,
                             cwd=TOP, env=env)
        copier = threading.Thread(target=_copy, args=(p.stdout, log, echo), daemon=True)
        copier.start()
        # SIGTERM (pkill, a CI runner giving up) becomes SystemExit, so that
        # QEMU goes with us instead of running on alone.
        main = threading.current_thread() is threading.main_thread()
        old = signal.signal(signal.SIGTERM, _exit_on_signal) if main else None
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        except BaseException:
            os.killpg(p.pid, signal.SIGKILL)
            raise
        finally:
            if main:
                signal.signal(signal.SIGTERM, old)
        copier.join(timeout=10)
    elapsed = time.monotonic() - start
    os.unlink(script)
    console = log_path.read_text(errors="replace")
    rc = None if timed_out else p.returncode
    return VMResult(rc, timed_out, elapsed, console, log_path, kernel_reports(console))


def _exit_on_signal(signum, frame):
    raise SystemExit(128 + signum)


def _copy(src, log, echo):
    prefix = echo.encode() if isinstance(echo, str) else None
    partial = b""
    for chunk in iter(lambda: src.read1(65536), b""):
        log.write(chunk)
        log.flush()
        if prefix is not None:
            lines = (partial + chunk).split(b"\n")
            partial = lines.pop()
            for line in lines:
                if line.startswith(prefix):
                    sys.stdout.buffer.write(line + b"\n")
            sys.stdout.flush()
        elif echo:
            sys.stdout.buffer.write(chunk)
            sys.stdout.flush()


def main(argv=None) -> int:
    ap = entry.parser(__doc__)
    ap.add_argument("--kernel", default=str(arch_dir("debug")),
                    help="kernel build folder or image (default: BUILD/debug, "
                         "BUILD/arm64-debug with ARCH=arm64)")
    ap.add_argument("--memory", default="2G")
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--numa", type=int, default=1, metavar="NODES")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--rwdir", action="append", default=[])
    ap.add_argument("--log", help="save the console log here")
    ap.add_argument("command", nargs="+")
    a = ap.parse_args(argv)
    try:
        r = run(a.kernel, shlex.join(a.command) if len(a.command) > 1 else a.command[0],
                memory=a.memory, cpus=a.cpus, timeout=a.timeout, numa_nodes=a.numa,
                rwdirs=a.rwdir, log_path=a.log, echo=True)
    except VMError as e:
        print(f"vm: {e}", file=sys.stderr)
        return 2
    if not r.ok:
        print("\nvm: " + r.describe(), file=sys.stderr)
        return 1
    return 0



if __name__ == "__main__":
    sys.exit(entry.run(main, "vm"))
