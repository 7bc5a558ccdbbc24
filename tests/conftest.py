# SPDX-License-Identifier: GPL-2.0
"""pytest set-up: options, the kernel under test, and the suite boot.

All kernel test programs run in a single boot of the debug kernel (the
`guest` fixture); each pytest test then judges one program from the files
that boot left in BUILD/results/ (make's BUILD=, by default build/).

What a test needs and does not find (the prepared tree of make source, the
programs of make bench-programs, a built kernel) skips it with the make
target that makes it, so that plain `pytest` on a fresh clone runs every
host test; make check and make test pass --require-built, under which
the same fails instead (a guest test without its kernel stops the run).
"""

import contextlib
import sys
from pathlib import Path

import pytest

from asyncfork import paths, programs, skips, suite, vm
# The tests take the checkout and the build folder from here.
from asyncfork.paths import BUILD as BUILD
from asyncfork.paths import TOP as TOP


def asyncfork_command(verb: str) -> list[str]:
    """The command line of `asyncfork VERB` (python -m asyncfork) with this
    pytest's python, the package of this checkout and its build folder."""
    return paths.python_command(verb, python=sys.executable)


def pytest_addoption(parser):
    g = parser.getgroup("async-fork")
    g.addoption("--kernel", default=str(paths.arch_dir("debug")),
                help="kernel build folder to test (default BUILD/debug; "
                     "BUILD/arm64-debug with ARCH=arm64)")
    g.addoption("--guest-memory", default="4G", help="guest memory (default 4G)")
    g.addoption("--guest-cpus", type=int, default=3,
                help="guest CPUs (default 3: the migration test needs 2 threads besides its own)")
    g.addoption("--write-baseline", action="store_true",
                help="record the upstream mm selftest results as the new baseline")
    g.addoption("--require-built", action="store_true",
                help="fail, not skip, a test whose kernel, programs or prepared tree is "
                     "missing (make check and make test pass it)")


# --require-built; and why the guest tests were skipped, if they were.
REQUIRE_BUILT = False
GUEST_SKIPPED: list[str] = []


def missing(why: str):
    """A test's input is not there: skip it saying `why` (which names the
    make target that makes it), or fail it under --require-built."""
    if REQUIRE_BUILT:
        pytest.fail(why)
    pytest.skip(why)


def need(path: Path, why: str) -> None:
    """missing(why) unless `path` exists."""
    if not Path(path).exists():
        missing(why)


def pytest_configure(config):
    global REQUIRE_BUILT
    REQUIRE_BUILT = config.getoption("--require-built")
    config.addinivalue_line("markers", "guest: boots a guest kernel")
    config.addinivalue_line("markers", "slow: a host-only test of several seconds "
                            "(make test runs it, make check does not)")


def pytest_collection_modifyitems(items):
    # A test that uses the suite boot boots a guest: make check leaves it out.
    for item in items:
        if "guest" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.guest)


def pytest_report_header(config):
    k = Path(config.getoption("--kernel"))
    try:
        vm.find_image(k)
    except vm.VMError:
        return [f"kernel under test: none built in {k}: guest tests will be skipped"]
    return [f"kernel under test: {k} ({vm.kernel_release(k)}), "
            f"{'KVM' if vm.kvm_usable() else 'TCG (no KVM)'}"]


def skip_guest(why: str):
    """No guest tests: stop the run under --require-built (make test), else
    skip each one with the same reason (said once more at the end)."""
    if REQUIRE_BUILT:
        pytest.exit(why, returncode=2)
    if not GUEST_SKIPPED:
        GUEST_SKIPPED.append(why)
    pytest.skip(f"guest test: {why}")


@pytest.fixture(scope="session")
def kernel(request) -> Path:
    k = Path(request.config.getoption("--kernel"))
    try:
        vm.find_image(k)
    except vm.VMError as e:
        skip_guest(str(e))
    return k


OWN_PROGRAMS = programs.own_programs()
upstream_programs = programs.upstream_programs
# The kselftests of the project's patches that run from the upstream list
# (madv_free_fork): judged case by case as OWN_PROGRAMS are.
OWN_SELFTESTS = programs.own_selftests()


def suite_config(config) -> str:
    """The configuration of the suite boot, for asyncfork.skips: ARCH/NAME
    of the kernel folder (make test: x86/debug, arm64/debug)."""
    name = Path(config.getoption("--kernel")).name
    return skips.config(name.removeprefix(f"{paths.ARCH}-"))


def is_own(name: str) -> bool:
    """A suite program the project wrote (asyncfork.skips applies)."""
    return (name in {p.name for p in OWN_PROGRAMS}
            or programs.base_name(name) in OWN_SELFTESTS)


# The suite boot, once the guest fixture ran: its skips are printed at the end.
_suite_runs: list[suite.SuiteRun] = []


@pytest.fixture(scope="session")
def guest(request, kernel) -> suite.SuiteRun:
    """One boot that runs every suite program; results for all tests."""
    upstream = upstream_programs(0 if request.config.getoption("--write-baseline") else 2)
    absent = programs.missing(OWN_PROGRAMS + upstream)
    if absent:
        skip_guest(f"not built: {', '.join(map(str, absent))}: run 'make test' "
                   f"(or make selftests upstream-selftests)")
    # Swap on zram, whose swap-ins may skip the swap cache: the path of
    # docs/findings/madv-free-swapin.md (fixed by kernel/patches/mm-fixes),
    # which madv_free_fork needs and a loop device never takes.
    # A guest of another architecture (ARCH=arm64 on x86) is emulated
    # instruction by instruction, several times slower than an x86 guest
    # under TCG: its timeouts are three times as long, its files apart.
    slow = 3 if paths.foreign() else 1
    for p in OWN_PROGRAMS + upstream:
        p.timeout *= slow
    # Each program's start and result as they happen, past pytest's capture.
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        run = suite.run_suite(
            kernel, OWN_PROGRAMS + upstream,
            BUILD / "results" / ("suite" if paths.ARCH == "x86" else f"{paths.ARCH}-suite"),
            memory=request.config.getoption("--guest-memory"),
            cpus=request.config.getoption("--guest-cpus"), numa_nodes=2, swap="zram",
            boot_timeout=180 * slow)
    sys.stderr.write(f"\nsuite boot: {run.kernelrelease}, {run.vm.elapsed:.0f} s, "
                     f"results in {run.outdir}\n")
    _suite_runs.append(run)
    return run


def pytest_terminal_summary(terminalreporter, config):
    k = Path(config.getoption("--kernel"))
    terminalreporter.write_line(f"kernel under test: {vm.kernel_release(k)} "
                                f"(project {vm.git_describe()})")
    skipped = [str(getattr(r, "longrepr", "")) for r in terminalreporter.stats.get("skipped", ())]
    guest = sum("guest test: " in r for r in skipped)
    if GUEST_SKIPPED:
        terminalreporter.write_line(f"{guest} guest tests skipped: {GUEST_SKIPPED[0]}")
    if len(skipped) > guest:
        terminalreporter.write_line(f"{len(skipped) - guest} other tests skipped (pytest -rs "
                                    f"says why: most name the make target they need)")
    for run in _suite_runs:
        for line in skip_summary(run, suite_config(config)):
            terminalreporter.write_line(line)


def skip_summary(run: suite.SuiteRun, config: str) -> list[str]:
    """The skipped cases of the suite boot, counted: the project's
    programs' with their reason from asyncfork.skips (or none), the
    upstream programs' (judged by their baseline) as a number."""
    own = upstream = 0
    lines = []
    for name, r in run.results.items():
        if is_own(name):
            s = skips.judge(config, name, r.cases)
            own += s.count
            lines += [f"  {name}: {c}: {why}" for c, why in s.allowed]
            lines += [f"  {name}: {c}: NO REASON (fails the run)" for c in s.unexplained]
        else:
            upstream += sum(c.status == "skip" for c in r.cases)
    return ([f"skipped cases on {config}: {own} of the project's programs, "
             f"{upstream} of the upstream mm selftests (judged by their baseline)"] + lines)
