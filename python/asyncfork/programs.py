# SPDX-License-Identifier: GPL-2.0
"""The programs of the suite boot (make test) and of the soak boot (make soak).

Both run the same programs; the soak runs the randomized ones for longer.
"""

import re
import shlex
import shutil
from pathlib import Path

from asyncfork import suite
from asyncfork import paths
from asyncfork.paths import PYTHON_DIR, TOP, arch_dir

SELFTESTS = arch_dir("selftests")
UPSTREAM_MM = arch_dir("upstream-mm")
# The guest's python: this one when the guest sees the host's root, the
# root's own (with python3-redis) in a guest of another architecture.
GUEST_PYTHON = paths.guest_python()
UPSTREAM_TIMEOUT = 900


def async_fork(mode: int, copy_threads: int) -> str:
    return f"sysctl -qw vm.async_fork={mode} vm.async_fork_copy_threads={copy_threads} && "


def stress_programs(seconds: int, redis_snapshots: int,
                    redis_keys: int = 50000) -> list[suite.Program]:
    """fork_stress in three kernel settings, stress-ng's memory stressors and
    the Redis digest check, all with every fork asynchronous; @seconds per
    fork_stress and stress-ng run, @redis_snapshots of @redis_keys keys per
    Redis configuration."""
    stress = f"{SELFTESTS / 'fork_stress'} -a -t {seconds}"
    timeout = 2 * seconds + 240
    return [
        # Pins (O_DIRECT, vmsplice), NUMA migration, KSM and khugepaged;
        # the child's copy helpers race with the parent's threads.
        # -D 80: at least 80% of its forks must leave tables to the child.
        suite.Program("fork_stress", timeout, async_fork(2, 2) + f"{stress} -d -n -k -D 80"),
        # Reclaim to swap: a 40 MiB memory cgroup for a 32 MiB process and its
        # children.  With swap on zram it found the zeros of
        # docs/findings/memcg-zeros.md, a 6.12 bug that kernel/patches/mm-fixes
        # fixes; no retry since.
        suite.Program("fork_stress_memcg", timeout,
                        async_fork(2, 1) + f"{stress} -g 40 -D 80"),
        # Allocation failures injected into the Async-fork code.
        suite.Program("fork_stress_faults", timeout,
                        async_fork(2, 2) + f"{stress} -m 64 -F 10"),
        # stress-ng's memory stressors, with their own verification; madvise
        # as nobody, since as root it also poisons pages (MADV_HWPOISON).
        suite.Program("stress-ng", 2 * seconds + 240, async_fork(2, 1) + shlex.join(
            ["stress-ng", "--fork", "2", "--vm", "2", "--vm-bytes", "64M",
             "--vm-method", "all", "--verify", "--mremap", "1", "--userfaultfd", "1",
             "--timeout", f"{seconds}s", "--metrics-brief"]) + " && " + shlex.join(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
             "env", "-C", "/tmp", "stress-ng", "--madvise", "2", "--verify",
             "--timeout", f"{seconds}s", "--metrics-brief"])),
        suite.Program("redis_digest", 300 + 200 * redis_snapshots,
                        async_fork(2, 1) + shlex.join(
                            ["env", f"PYTHONPATH={PYTHON_DIR}", GUEST_PYTHON,
                             str(TOP / "tests/guest/redis_digest.py"),
                             "--expect-async", "--snapshots", str(redis_snapshots),
                             "--keys", str(redis_keys)])),
    ]


def own_programs() -> list[suite.Program]:
    """The project's programs.  fork_snapshot runs twice: with the default
    fork (vm.async_fork=0) and with every fork asynchronous (2), each
    checking by /proc/vmstat that its forks went the way the run says."""
    snap = SELFTESTS / "fork_snapshot"
    # 120 cases: about 4 minutes a run on an idle 2-core host under TCG,
    # twice that on a loaded one.
    return [
        suite.Program("fork_snapshot", 900,
                        async_fork(0, 1) + f"FORK_SNAPSHOT_EXPECT_ASYNC=0 {snap}"),
        # Four copy threads: the child's helpers race with every parent path.
        suite.Program("fork_snapshot_async", 900,
                        async_fork(2, 4) + f"FORK_SNAPSHOT_EXPECT_ASYNC=1 {snap}"),
        suite.Program("async_fork", 900, str(SELFTESTS / "async_fork")),
    ] + stress_programs(seconds=15, redis_snapshots=1, redis_keys=20000)


# The patch series whose selftests are the project's own: Async-fork's and
# the fixes to 6.12 (kernel/patches/selftests-mm only fixes upstream ones).
OWN_SERIES = ("async-fork", "mm-fixes")
TEST_GEN_RE = re.compile(r"^\+TEST_GEN_(?:FILES|PROGS)\s*\+?=\s*(\S+)\s*$", re.M)


def own_selftests(patches: Path = TOP / "kernel/patches") -> set[str]:
    """The kselftest programs that the project's patches add to the tree
    (a "+TEST_GEN_FILES += NAME" line): every case of each must pass in
    make test, as the project's programs must, wherever it runs from."""
    return {m[1] for series in OWN_SERIES for f in sorted((patches / series).glob("*.patch"))
            for m in TEST_GEN_RE.finditer(f.read_text(errors="replace"))}


def base_name(program: str) -> str:
    """The executable a suite program runs: its name without the "-2" of a
    second run (suite.read_programs)."""
    return re.sub(r"-\d+$", "", program)


def upstream_programs(mode: int = 2) -> list[suite.Program]:
    """The upstream mm selftests, each run with vm.async_fork=@mode: 2 (every
    fork asynchronous) when testing, 0 when recording the baseline; the child
    copies alone (the default)."""
    progs = suite.read_programs(TOP / "tests/upstream_mm.list",
                                  UPSTREAM_MM, UPSTREAM_TIMEOUT)
    for p in progs:
        p.command = async_fork(mode, 1) + p.command
    return progs


def last_command(command: str) -> list[str]:
    """The words of the last command of @command ("A && B && C": C), looking
    through a wrapper that runs a command line (ksm-merge bash -c '...')."""
    words = shlex.split(command)
    if len(words) == 4 and words[0].endswith("ksm-merge") and words[1:3] == ["bash", "-c"]:
        return last_command(words[3])
    while "&&" in words:
        words = words[words.index("&&") + 1:]
    return words


def executable(command: str) -> str:
    """The program that @command runs last, past its environment settings."""
    return next(w for w in last_command(command) if "=" not in w and w != "env")


def missing(programs: list[suite.Program]) -> list[str]:
    """Executables of @programs that are not built or not installed."""
    gone = set()
    for p in programs:
        exe = executable(p.command)
        if not (Path(exe).exists() if "/" in exe else shutil.which(exe)):
            gone.add(exe)
    return sorted(gone)
