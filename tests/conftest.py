"""pytest set-up: options, the kernel under test, and the suite boot.

All kernel test programs run in a single boot of the debug kernel (the
`guest` fixture); each pytest test then judges one program from the files
that boot left in build/results/.
"""

import shlex
import sys
from pathlib import Path

import pytest

TOP = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(TOP / "tests"))
sys.path.insert(0, str(TOP / "scripts"))

import harness  # noqa: E402
import vm  # noqa: E402

BUILD = TOP / "build"


def pytest_addoption(parser):
    g = parser.getgroup("async-fork")
    g.addoption("--kernel", default=str(BUILD / "debug"),
                help="kernel build folder to test (default build/debug)")
    g.addoption("--guest-memory", default="4G", help="guest memory (default 4G)")
    g.addoption("--guest-cpus", type=int, default=3,
                help="guest CPUs (default 3: the migration test needs 2 threads besides its own)")
    g.addoption("--write-baseline", action="store_true",
                help="record the upstream mm selftest results as the new baseline")


def pytest_configure(config):
    config.addinivalue_line("markers", "guest: boots a guest kernel")


def pytest_report_header(config):
    k = Path(config.getoption("--kernel"))
    return [f"kernel under test: {k} ({vm.kernel_release(k)}), "
            f"{'KVM' if vm.kvm_usable() else 'TCG (no KVM)'}"]


@pytest.fixture(scope="session")
def kernel(request) -> Path:
    k = Path(request.config.getoption("--kernel"))
    try:
        vm.find_image(k)
    except vm.VMError as e:
        pytest.exit(str(e), returncode=2)
    return k


# Programs of the suite boot: the project's own, then the upstream mm ones.
# fork_snapshot runs twice: with the default fork (vm.async_fork=0) and with
# every fork asynchronous (vm.async_fork=2), each checking by /proc/vmstat
# that its forks went the way the run says.
FORK_SNAPSHOT = BUILD / "selftests/fork_snapshot"
OWN_PROGRAMS = [
    harness.Program("fork_snapshot", 600,
                    f"sysctl -qw vm.async_fork=0 && FORK_SNAPSHOT_EXPECT_ASYNC=0 {FORK_SNAPSHOT}"),
    # Four copy threads: the child's helpers race with every parent path.
    harness.Program("fork_snapshot_async", 600,
                    "sysctl -qw vm.async_fork=2 vm.async_fork_copy_threads=4 && "
                    f"FORK_SNAPSHOT_EXPECT_ASYNC=1 {FORK_SNAPSHOT}"),
    harness.Program("async_fork", 600, str(BUILD / "selftests/async_fork")),
]
UPSTREAM_TIMEOUT = 900


def upstream_programs(async_fork: int = 2):
    """The upstream mm selftests, each run with vm.async_fork=`async_fork`:
    2 (every fork asynchronous) when testing, 0 when recording the baseline;
    the child copies alone (the default)."""
    progs = harness.read_programs(TOP / "tests/upstream_mm.list",
                                  BUILD / "upstream-mm", UPSTREAM_TIMEOUT)
    for p in progs:
        p.command = (f"sysctl -qw vm.async_fork={async_fork} vm.async_fork_copy_threads=1"
                     f" && {p.command}")
    return progs


@pytest.fixture(scope="session")
def guest(request, kernel) -> harness.SuiteRun:
    """One boot that runs every suite program; results for all tests."""
    upstream = upstream_programs(0 if request.config.getoption("--write-baseline") else 2)
    raw = harness.read_programs(TOP / "tests/upstream_mm.list", BUILD / "upstream-mm", 0)
    own = [FORK_SNAPSHOT, BUILD / "selftests/async_fork"]
    for exe in own + [Path(shlex.split(p.command)[0]) for p in raw]:
        if not exe.exists():
            pytest.exit(f"{exe} is not built: run 'make test' (or make selftests "
                        f"upstream-selftests)", returncode=2)
    run = harness.run_suite(
        kernel, OWN_PROGRAMS + upstream, BUILD / "results/suite",
        memory=request.config.getoption("--guest-memory"),
        cpus=request.config.getoption("--guest-cpus"), numa_nodes=2)
    sys.stderr.write(f"\nsuite boot: {run.kernelrelease}, {run.vm.elapsed:.0f} s, "
                     f"results in {run.outdir}\n")
    return run


def pytest_terminal_summary(terminalreporter, config):
    k = Path(config.getoption("--kernel"))
    terminalreporter.write_line(f"kernel under test: {vm.kernel_release(k)} "
                                f"(project {vm.git_describe()})")
