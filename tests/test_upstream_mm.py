# SPDX-License-Identifier: GPL-2.0
"""Upstream mm selftests of the 6.12 tree, in the suite boot, against a baseline.

tests/baseline/upstream-mm.txt lists every case of every program with the
status it had on the kernel without Async-fork ("make baseline" rewrites it).
A case that passed there must pass here; a case that did not pass there
(a test that needs hardware or settings the guest lacks) is reported only.
A program that the project's own patches add (madv_free_fork, the test of
kernel/patches/mm-fixes) must also exit 0 and pass every case, skips only
as asyncfork.skips allows, whatever the baseline says.
"""

import time
import warnings

import pytest

from asyncfork import paths, programs, skips, suite, vm

from conftest import TOP, is_own, suite_config, upstream_programs

# Each architecture has its own: the cases a guest can pass differ.
BASELINE = TOP / ("tests/baseline/upstream-mm.txt" if paths.ARCH == "x86"
                  else f"tests/baseline/upstream-mm-{paths.ARCH}.txt")
_recorded: dict[str, list] = {}


def load_baseline() -> dict[str, dict[str, str]]:
    if not BASELINE.exists():
        arch = "" if paths.ARCH == "x86" else f" ARCH={paths.ARCH}"
        pytest.fail(f"no baseline {BASELINE.relative_to(TOP)}: record it with "
                    f"'make baseline{arch}' (Async-fork off, same kernel)", pytrace=False)
    base: dict[str, dict[str, str]] = {}
    for line in BASELINE.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        prog, status, case = line.split("\t", 2)
        base.setdefault(prog, {})[case] = status
    return base


@pytest.mark.parametrize("name", [p.name for p in upstream_programs()])
def test_upstream_mm(guest, name, request):
    r = guest.results[name]
    assert r.ran, "\n".join(guest.problems(name))
    assert not r.timed_out, f"{name} timed out:\n" + "\n".join(guest.problems(name))
    assert not r.reports, "\n\n".join(f"kernel report while {name} ran:\n{x}" for x in r.reports)
    assert r.cases, f"{name} reported no KTAP results:\n{r.output[-3000:]}"
    if request.config.getoption("--write-baseline"):
        _recorded[name] = r.cases
        _recorded["kernelrelease"] = guest.kernelrelease
        return
    base = load_baseline().get(name)
    assert base, (f"{name} has no baseline in {BASELINE.name}: run 'make baseline"
                  f"{'' if paths.ARCH == 'x86' else ' ARCH=' + paths.ARCH}'")
    now = {c.name: c.status for c in r.cases}
    lost = [c for c, st in base.items() if st == "pass" and now.get(c) != "pass"]
    assert not lost, (f"{name}: {len(lost)} baseline cases no longer pass:\n" +
                      "\n".join(f"  {c}: {now.get(c, 'missing')}" for c in lost) +
                      f"\noutput tail:\n{r.output[-3000:]}")
    if is_own(name):
        own_program_verdict(guest, name, suite_config(request.config))
    for i, out in enumerate(r.failed_runs, 1):
        flaky = [c.name for c in suite.parse_output(name, out) if c.status == "fail"]
        warnings.warn(f"{name}: run {i} of {len(r.failed_runs) + 1} failed and was repeated "
                      f"(retries= in tests/upstream_mm.list); its failed cases: "
                      f"{flaky or 'none reported'}; tail: {out[-300:]!r}")


def own_program_verdict(guest: suite.SuiteRun, name: str, config: str) -> None:
    """A kselftest of the project's patches (madv_free_fork: the tests of
    kernel/patches/mm-fixes) is judged as the project's programs are,
    whatever the baseline lists: its exit code, every case passed, and a
    skip only with its reason in asyncfork.skips."""
    problems = skips.verdict(guest, name, config)
    assert not problems, (f"{name} is the project's own test "
                          f"({', '.join(programs.OWN_SERIES)} patches): every case must pass\n"
                          + "\n".join(problems))


@pytest.fixture(scope="session", autouse=True)
def _write_baseline(request):
    yield
    if not request.config.getoption("--write-baseline") or not _recorded:
        return
    lines = ["# Upstream mm selftest results with Async-fork off (vm.async_fork=0).",
             f"# kernel {_recorded['kernelrelease']}, recorded {time.strftime('%Y-%m-%d')} by 'make baseline'",
             f"# ({paths.ARCH} debug config, vm.async_fork=0, guest with "
             f"{request.config.getoption('--guest-cpus')} CPUs, "
             f"{request.config.getoption('--guest-memory')} in 2 NUMA nodes, "
             f"{'KVM' if vm.kvm_usable() else 'TCG'}).",
             "# program<TAB>status<TAB>case; a 'pass' case must keep passing."]
    for p in upstream_programs():
        for c in _recorded.get(p.name, []):
            lines.append(f"{p.name}\t{c.status}\t{c.name}")
    BASELINE.parent.mkdir(exist_ok=True)
    BASELINE.write_text("\n".join(lines) + "\n")
