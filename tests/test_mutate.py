# SPDX-License-Identifier: GPL-2.0
"""make mutate's table and verdicts, host only: every row names a hook the
kernel knows, a caller that exists, and a test case that exists; a row's
verdict follows from its program's result."""

import re

import pytest

from asyncfork import mutate
from asyncfork import suite as harness
from conftest import BUILD, TOP

PATCHES = TOP / "kernel/patches/async-fork"


def patch_text(pattern: str) -> str:
    (p,) = PATCHES.glob(pattern)
    return p.read_text()


def kernel_hooks() -> set[str]:
    text = patch_text("*-debugfs-switches-to-test-the-hooks.patch")
    body = text.split("af_hooks[] = {", 1)[1].split("};", 1)[0]
    return set(re.findall(r'"(\w+)"', body))


def test_every_row_names_a_hook_the_kernel_knows():
    hooks = kernel_hooks()
    assert "drop_mm" in hooks and "fault" in hooks
    for r in mutate.ROWS:
        assert r.hook.split("@")[0] in hooks, r


def test_every_test_case_exists():
    selftests = patch_text("*-selftests-mm-Async-fork-exact-snapshots-on-every-pat.patch")
    snapshot_cases = set(re.findall(r"PARENT_OP_TEST\((\w+), SYNC_\w+\)", selftests))
    snapshot_cases = {f"parent_{c}" for c in snapshot_cases}
    snapshot_cases |= set(re.findall(r"TEST_F_TIMEOUT\(snapshot, (\w+),", selftests))
    af_cases = set(re.findall(r"TEST_F_TIMEOUT\(af, (\w+),", selftests))
    for r in mutate.ROWS:
        if not r.test:
            assert r.why_none, r
            continue
        m = re.search(r"/(fork_snapshot -r snapshot\.anon_4k\.|async_fork -t )(\w+)$", r.test)
        assert m, r
        cases = snapshot_cases if m[1].startswith("fork_snapshot") else af_cases
        assert m[2] in cases, r


def test_callers_exist_in_the_built_kernel():
    system_map = BUILD / "debug/System.map"
    if not system_map.exists():
        pytest.skip("no build/debug/System.map: run 'make kernel-debug'")
    symbols = {line.split()[2] for line in system_map.read_text().splitlines()}
    missing = [r.hook for r in mutate.ROWS
               if r.test and "@" in r.hook and r.hook.split("@")[1] not in symbols]
    assert not missing, f"callers not in System.map (inlined?): {missing}"


def result(rc=0, output="", ran=True, cases=("pass",)):
    p = harness.Program("row00", 60, "true")
    return harness.ProgramResult(p, ran, rc, output, "", 1.0,
                                 [harness.Case("c", s) for s in cases])


def test_hits_are_read_from_the_mutate_line():
    assert mutate.hits("ok 1 x\n# mutate: sync@zap_page_range_single hits 12\n") == 12
    assert mutate.hits("ok 1 x\n") is None


def test_verdicts():
    line = "# mutate: fault hits 3\n"
    assert mutate.verdict(result(output=line), []) == ("missed", 3)
    assert mutate.verdict(result(output=line, rc=1), ["row00 exited 1"]) == ("caught", 3)
    assert mutate.verdict(result(output="# mutate: fault hits 0\n"), []) == ("not reached", 0)
    # A failure where the hook was never skipped says nothing about the hook.
    assert mutate.verdict(result(output="# mutate: fault hits 0\n", rc=1),
                          ["row00 exited 1"]) == ("failed, not reached", 0)
    assert mutate.verdict(result(ran=False), ["did not run"]) == ("caught", None)
    assert mutate.verdict(None, []) == ("no test", None)


def test_program_turns_the_hook_back_on_and_keeps_the_exit_code():
    cmd = mutate.program(3, mutate.ROWS[0]).command
    assert cmd.startswith(f"echo fault@__handle_mm_fault > {mutate.MUTATE} && ")
    assert "rc=$?" in cmd and "echo none > " in cmd and cmd.endswith("exit $rc; }")


def test_rows_after_an_oops_run_in_a_new_boot(tmp_path, monkeypatch):
    # Boot 1: row 1 oopses the kernel and the guest stops there (stopped);
    # rows 2 and 3 run in boot 2, on a sound kernel.
    rows = [mutate.Row(f"row {i}", "fault", f"true {i}") for i in range(4)]
    boots = []

    class Run:
        def __init__(self, progs, outdir, stop_after):
            self.results = {}
            for k, p in enumerate(progs):
                ran = stop_after is None or k <= stop_after
                out = "# mutate: fault hits 2\n"
                self.results[p.name] = (result(ran=ran, rc=1 if k == stop_after else 0,
                                               output=out) if ran else result(ran=False))
            self.oops = stop_after

        def problems(self, name):
            r = self.results[name]
            return [f"{name} exited 1"] if r.ran and r.rc else []

    def fake_run_suite(kernel, progs, outdir, **kw):
        assert kw.get("stop_on_oops") is True
        outdir.mkdir(parents=True, exist_ok=True)
        stop_after = 1 if not boots else None
        if stop_after is not None:
            (outdir / "stopped").write_text(progs[stop_after].name + "\n")
        boots.append([p.name for p in progs])
        return Run(progs, outdir, stop_after)

    monkeypatch.setattr(mutate.harness, "run_suite", fake_run_suite)
    table = mutate.run(tmp_path / "kernel", rows, tmp_path / "out")
    assert boots == [["row00", "row01", "row02", "row03"], ["row02", "row03"]]
    assert [(r["verdict"], r["boot"]) for r in table] == [
        ("missed", 1), ("caught", 1), ("missed", 2), ("missed", 2)]


def test_a_stopped_row_that_never_reached_its_hook_runs_again_once(tmp_path, monkeypatch):
    # Row 1 fails without reaching its hook and the kernel oopses meanwhile
    # (a child an earlier row left, killed as row 1 cleans up): row 1 runs
    # again in the next boot, once, even if it does the same there.
    rows = [mutate.Row(f"row {i}", "fault", f"true {i}") for i in range(3)]
    boots = []

    class Run:
        def __init__(self, progs):
            self.results = {p.name: result(rc=1, output="# mutate: fault hits 0\n")
                            for p in progs}

        def problems(self, name):
            return [f"{name} exited 1"]

    def fake_run_suite(kernel, progs, outdir, **kw):
        outdir.mkdir(parents=True, exist_ok=True)
        if progs[0].name == "row01" or len(progs) == 3:
            k = [p.name for p in progs].index("row01")
            (outdir / "stopped").write_text("row01\n")
            progs = progs[:k + 1]
        boots.append([p.name for p in progs])
        run = Run(progs)
        for name in ("row00", "row01", "row02"):
            run.results.setdefault(name, result(ran=False))
        return run

    monkeypatch.setattr(mutate.harness, "run_suite", fake_run_suite)
    table = mutate.run(tmp_path / "kernel", rows, tmp_path / "out")
    assert boots == [["row00", "row01"], ["row01"], ["row02"]]
    assert [(r["verdict"], r["boot"]) for r in table] == [
        ("failed, not reached", 1), ("failed, not reached", 2), ("failed, not reached", 3)]
