# SPDX-License-Identifier: GPL-2.0
"""Every case of every program the project wrote is enforced, and a skip
fails make test, make soak and make test-deb unless asyncfork.skips says
why for that configuration.  Host-only: the runs are built from outputs.

Before (issue 30, "Verdicts that miss nothing"): madv_free_fork, the test
of kernel/patches/mm-fixes, was judged by the upstream baseline, which
lists only its first case, with its exit code ignored, so its two KSM
cases could fail or skip in a green make test; make soak and make test-deb
passed any skip and their records did not count them.
"""

import re
from pathlib import Path

import pytest

from asyncfork import fork_stress, programs, results, skips, soak_record, suite, test_deb, vm
from conftest import OWN_PROGRAMS, TOP, is_own, upstream_programs

# kselftest_harness's output of madv_free_fork with its two KSM cases
# (kernel/patches/mm-fixes 0004, 0006): the first skipped (ksmd too slow),
# the second failed; the program exited 1.
MADV_FREE_FORK_BAD = """\
TAP version 13
1..3
# Starting 3 tests from 1 test cases.
#  RUN           madv_free_fork.child_keeps_pages_swapped_in_by_parent ...
#            OK  madv_free_fork.child_keeps_pages_swapped_in_by_parent
ok 1 madv_free_fork.child_keeps_pages_swapped_in_by_parent
#  RUN           madv_free_fork.child_keeps_pages_unmerged_by_parent ...
#      SKIP      ksmd merged 0 of 512 pages in 2 minutes
#            OK  madv_free_fork.child_keeps_pages_unmerged_by_parent
ok 2 madv_free_fork.child_keeps_pages_unmerged_by_parent # SKIP ksmd merged 0 of 512 pages in 2 minutes
#  RUN           madv_free_fork.ksm_page_freed_in_one_place_keeps_later_merges ...
# madv_free_fork.c:301:ksm_page_freed_in_one_place_keeps_later_merges:Expected 0 (0) == bad (12)
#          FAIL  madv_free_fork.ksm_page_freed_in_one_place_keeps_later_merges
not ok 3 madv_free_fork.ksm_page_freed_in_one_place_keeps_later_merges
# FAILED: 1 / 3 tests passed.
# Totals: pass:1 fail:1 xfail:0 xpass:0 skip:1 error:0
"""
MADV_FREE_FORK_GOOD = re.sub(r" # SKIP .*", "", MADV_FREE_FORK_BAD).replace("not ok 3", "ok 3")

# async_fork on Debian's config: no fault injection, no GUP_TEST.
ASYNC_FORK_DEB = """\
TAP version 13
1..4
ok 1 af.counters_move
ok 2 af.child_copy_fails # SKIP no fail_page_alloc stack filter (FAULT_INJECTION_STACKTRACE_FILTER)
ok 3 af.pinned_process_falls_back # SKIP no /sys/kernel/debug/gup_test (CONFIG_GUP_TEST)
ok 4 af.parallel_copy
"""
# A skip that no configuration explains.
ASYNC_FORK_TRACEFS = ASYNC_FORK_DEB.replace(
    "ok 4 af.parallel_copy", "ok 4 af.parallel_copy # SKIP no tracefs at /sys/kernel/tracing")
FORK_SNAPSHOT_ARM64 = """\
TAP version 13
1..2
ok 1 snapshot.anon_4k.repeated_forks
ok 2 snapshot.anon_4k.parent_clear_refs_soft_dirty # SKIP no soft-dirty tracking (CONFIG_MEM_SOFT_DIRTY)
"""


def run_of(outputs: dict[str, tuple[str, int]]) -> suite.SuiteRun:
    """A SuiteRun as run_suite() returns it: program -> (output, exit code)."""
    results = {}
    for name, (out, rc) in outputs.items():
        p = suite.Program(name, 600, name)
        results[name] = suite.ProgramResult(p, True, rc, out, "", 10.0,
                                            suite.parse_output(name, out))
    res = vm.VMResult(0, False, 100.0, "", Path("/dev/null"), [])
    return suite.SuiteRun(results, res, Path("/nonexistent"), "6.12.117-asyncfork-debug", "")


def test_own_selftests_are_the_patches_own():
    assert programs.own_selftests() == {"async_fork", "fork_snapshot", "madv_free_fork"}


def test_every_own_selftest_runs_in_make_test_and_is_judged_as_own():
    """Each program the patches add runs in the suite boot, and the suite
    judges each of its runs by the rule of the project's programs."""
    runs = {Path(programs.executable(p.command)).name: p.name
            for p in OWN_PROGRAMS + upstream_programs()}
    for exe in programs.own_selftests():
        assert exe in runs, f"{exe} is not run by make test"
    for p in OWN_PROGRAMS + upstream_programs():
        exe = Path(programs.executable(p.command)).name
        assert is_own(p.name) == (p in OWN_PROGRAMS or exe in programs.own_selftests()), p.name
    assert is_own("madv_free_fork") and not is_own("cow") and not is_own("ksm_functional_tests")


def baseline_lost(name: str, run: suite.SuiteRun) -> list[str]:
    """What test_upstream_mm's baseline comparison alone finds (before this
    rule, the whole judgement of madv_free_fork's cases)."""
    base = {}
    for line in (TOP / "tests/baseline/upstream-mm.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            prog, status, case = line.split("\t", 2)
            if prog == name:
                base[case] = status
    now = {c.name: c.status for c in run.results[name].cases}
    return [c for c, st in base.items() if st == "pass" and now.get(c) != "pass"]


def test_madv_free_fork_ksm_cases_fail_make_test():
    run = run_of({"madv_free_fork": (MADV_FREE_FORK_BAD, 1)})
    # The baseline alone passes it: the gap of issue 30.
    assert baseline_lost("madv_free_fork", run) == []
    problems = skips.verdict(run, "madv_free_fork", "x86/debug")
    assert "madv_free_fork exited 1" in problems
    assert "case failed: madv_free_fork.ksm_page_freed_in_one_place_keeps_later_merges" in problems
    assert any(p.startswith("madv_free_fork: 1 cases skipped on x86/debug with no reason")
               and "child_keeps_pages_unmerged_by_parent" in p for p in problems), problems
    good = run_of({"madv_free_fork": (MADV_FREE_FORK_GOOD, 0)})
    assert skips.verdict(good, "madv_free_fork", "x86/debug") == []


def test_skip_is_allowed_only_on_its_configuration():
    cases = suite.parse_ktap(FORK_SNAPSHOT_ARM64)
    assert skips.judge("arm64/debug", "fork_snapshot_async", cases).unexplained == []
    assert skips.judge("arm64/deb-cloud-arm64", "fork_snapshot", cases).allowed
    assert skips.judge("x86/debug", "fork_snapshot", cases).unexplained == [
        "snapshot.anon_4k.parent_clear_refs_soft_dirty"]
    cases = suite.parse_ktap(ASYNC_FORK_DEB)
    for config in ("x86/deb-cloud-amd64", "x86/deb-amd64", "arm64/deb-cloud-arm64"):
        s = skips.judge(config, "async_fork", cases)
        assert s.count == 2 and not s.unexplained
        assert all(why for _, why in s.allowed)
    assert skips.judge("x86/debug", "async_fork", cases).unexplained == [
        "af.child_copy_fails", "af.pinned_process_falls_back"]
    # The allow-list names a program: another's case of that name is no exception.
    assert skips.judge("x86/deb-cloud-amd64", "fork_stress", cases).unexplained
    s = skips.judge("x86/deb-cloud-amd64", "async_fork", suite.parse_ktap(ASYNC_FORK_TRACEFS))
    assert s.unexplained == ["af.parallel_copy"] and s.count == 3


def test_allow_list_names_real_cases_with_reasons():
    """Each entry's cases are cases of the project's selftests (a test
    renamed leaves no stale exception behind), each with its reason."""
    text = "".join(f.read_text() for series in programs.OWN_SERIES
                   for f in (TOP / "kernel/patches" / series).glob("*.patch"))
    tests = set(re.findall(r"^\+TEST_F(?:_TIMEOUT)?\(\w+, (\w+)", text, re.M))
    for a in skips.ALLOWED:
        assert len(a.reason) > 40 and a.configs, a
        for pattern in a.cases:
            assert pattern.rsplit(".", 1)[1] in tests, pattern


def test_soak_fails_an_unexplained_skip_and_counts_skips(tmp_path):
    run = run_of({"async_fork": (ASYNC_FORK_DEB, 0)})
    progs = [run.results["async_fork"].program]
    assert fork_stress.judge(run, progs, [], "x86/deb-cloud-amd64") == {"async_fork": []}
    problems = fork_stress.judge(run, progs, [], "x86/debug")
    assert problems["async_fork"] and "2 cases skipped on x86/debug" in problems["async_fork"][0]
    # With no configuration no skip is allowed.
    assert fork_stress.judge(run, progs, [])["async_fork"]
    kdir = tmp_path / "debug"
    kdir.mkdir()
    rec = soak_record.make_record(kernel_name="debug", kernel_dir=kdir, run=run, progs=progs,
                                  problems=problems, runs=[], started=1795600000.0,
                                  finished=1795600100.0,
                                  machine_info=results.machine(3, "4G", 2, "zram"),
                                  argv=[], args={})
    assert rec["skip_config"].endswith("/debug")
    assert (rec["skipped"], rec["skipped_unexplained"], rec["passed"]) == (2, 2, False)
    assert rec["programs"]["async_fork"]["skipped_unexplained"] == [
        "af.child_copy_fails", "af.pinned_process_falls_back"]


def test_test_deb_counts_skips_and_allows_debians(capsys):
    run = run_of({"async_fork": (ASYNC_FORK_DEB, 0),
                  "fork_snapshot": ("TAP version 13\n1..1\nok 1 snapshot.anon_4k.repeated_forks\n",
                                    0)})
    progs = [r.program for r in run.results.values()]
    boot = test_deb.judge_boot("defaults", run, progs, test_deb.skip_config("cloud-amd64", "x86"))
    assert boot["passed"] and (boot["skipped"], boot["skipped_unexplained"]) == (2, 0)
    allowed = boot["programs"]["async_fork"]["skipped_allowed"]
    assert [a["case"] for a in allowed] == ["af.child_copy_fails", "af.pinned_process_falls_back"]
    out = capsys.readouterr().out
    assert "async_fork: pass (10 s, 4 cases, 2 skipped)" in out
    assert "skipped af.child_copy_fails: Debian's config has no fault injection" in out
    bad = run_of({"async_fork": (ASYNC_FORK_TRACEFS, 0)})
    boot = test_deb.judge_boot("walkers", bad, progs[:1], test_deb.skip_config("cloud-amd64"))
    assert not boot["passed"] and boot["skipped_unexplained"] == 1


@pytest.mark.parametrize("config", ["x86/debug", "arm64/debug"])
def test_make_test_prints_its_skips(config):
    from conftest import skip_summary
    run = run_of({"fork_snapshot": (FORK_SNAPSHOT_ARM64, 0), "cow": ("ok 1 a # SKIP b\n", 0)})
    lines = skip_summary(run, config)
    assert lines[0] == (f"skipped cases on {config}: 1 of the project's programs, "
                        f"1 of the upstream mm selftests (judged by their baseline)")
    assert lines[1].startswith("  fork_snapshot: snapshot.anon_4k.parent_clear_refs_soft_dirty: ")
    assert ("NO REASON" in lines[1]) == (config == "x86/debug")
