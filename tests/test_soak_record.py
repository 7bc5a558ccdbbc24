# SPDX-License-Identifier: GPL-2.0
"""make soak's record and judgement, on the host (asyncfork.fork_stress,
asyncfork.soak_record, asyncfork.soak): fork_stress's counters are parsed
from its output and summed over runs, a run that expected Async-fork and
deferred nothing fails the soak, and the JSON record has the fields issue
16 asks for.  No guest boots here."""

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from asyncfork import fork_stress, programs, results, soak, soak_record, suite, vm
from conftest import BUILD, TOP, asyncfork_command

# What fork_stress prints: KTAP, its messages behind "# ".
FORK_STRESS_OUT = """\
TAP version 13
1..4
# seed 0x6a09e667f3bcc909: 405 s, 4 workers, 2 children at once, 32 MiB, KSM, NUMA migration, O_DIRECT
# write     183312
# fork      290
ok 1 snapshots exact: 290 children (0 killed by a failed copy, 0 forks failed)
ok 2 parent memory exact (0 pages differ, 0 forks failed)
# async forks 290, page tables copied by children 5230, by the parent 1204
# fork_stress: forks 290, deferred 261 (90%), syncs 1204, child copies 5230, errors 0
ok 3 counters moved
ok 4 page tables freed (+0 KiB)
# Totals: pass:4 fail:0 xfail:0 xpass:0 skip:0 error:0
"""

# Before fork_stress printed its counter line (the fork_stress of today).
FORK_STRESS_OLD = """\
TAP version 13
1..4
# seed 0x1: 405 s, 4 workers, 2 children at once, 64 MiB
ok 1 snapshots exact: 57 children (3 killed by a failed copy, 1 forks failed)
ok 2 parent memory exact (0 pages differ, 1 forks failed)
# async forks 57, page tables copied by children 800, by the parent 12
ok 3 counters moved
ok 4 page tables freed (+4 KiB)
"""

FORK_STRESS_MISMATCH = """\
TAP version 13
1..4
# child 4242: exit 1
not ok 1 snapshots exact: 2 of 41 children found a difference
ok 2 parent memory exact (0 pages differ, 0 forks failed)
fork_stress: forks 41, deferred 37 (90.2%), syncs 88, child copies 700, errors 0
ok 3 counters moved
ok 4 page tables freed (+0 KiB)
"""


def stress_line(forks, deferred, syncs=10, copies=100, errors=0):
    pct = 100 * deferred // forks if forks else 0
    return (f"# fork_stress: forks {forks}, deferred {deferred} ({pct}%), "
            f"syncs {syncs}, child copies {copies}, errors {errors}\n")


def test_parse_counter_line():
    assert fork_stress.parse(FORK_STRESS_OUT) == {
        "forks": 290, "forks_deferred": 261, "syncs": 1204, "child_copies": 5230,
        "errors": 0, "children_checked": 290, "children_killed": 0}


def test_parse_without_counter_line():
    # Counters unknown (null), children checked still known.
    assert fork_stress.parse(FORK_STRESS_OLD) == {
        "forks": None, "forks_deferred": None, "syncs": None, "child_copies": None,
        "errors": None, "children_checked": 57, "children_killed": 3}


def test_parse_failed_run_and_bare_line():
    # The failure form of the first result, a line without "# ", a
    # percentage with decimals.
    got = fork_stress.parse(FORK_STRESS_MISMATCH)
    assert (got["forks"], got["forks_deferred"], got["syncs"], got["child_copies"],
            got["children_checked"], got["children_killed"]) == (41, 37, 88, 700, 41, None)


def test_parse_unreadable_counter():
    # fork_stress prints -1 for a /proc/vmstat counter it could not read.
    got = fork_stress.parse(
        "fork_stress: forks 12, deferred 0 (0%), syncs -1, child copies -1, errors -1\n")
    assert (got["forks"], got["forks_deferred"], got["syncs"], got["child_copies"],
            got["errors"]) == (12, 0, None, None, None)


def test_parse_rejects_other_lines():
    # Near misses are not counters: another program's name, a missing field.
    text = ("# fork_bench: forks 9, deferred 9 (100%), syncs 1, child copies 1, errors 0\n"
            "# fork_stress: forks 9, deferred 9 (100%), syncs 1, errors 0\n")
    assert fork_stress.parse(text)["forks"] is None
    assert fork_stress.parse("")["children_checked"] is None


def test_total():
    runs = [{"forks": 3}, {"forks": 4}]
    assert fork_stress.total(runs, "forks") == 7
    assert fork_stress.total(runs + [{"forks": None}], "forks") is None
    assert fork_stress.total([], "forks") is None


def result(p, output, failed_runs=(), rc=0, dmesg=""):
    return suite.ProgramResult(p, True, rc, output, dmesg, 12.5,
                                 suite.parse_output(p.name, output), list(failed_runs))


def suite_run(progs, outputs, console="", failed=None):
    """A SuiteRun as suite.run_suite() returns it, from program outputs."""
    failed = failed or {}
    results = {p.name: result(p, outputs.get(p.name, "TAP version 13\n1..1\nok 1 x\n"),
                              failed.get(p.name, ()))
               for p in progs}
    res = vm.VMResult(0, False, 100.0, console, Path("/dev/null"), vm.kernel_reports(console))
    return suite.SuiteRun(results, res, Path("/nonexistent"), "6.12.117-asyncfork-kasan", "")


STRESS_NG_OK = "stress-ng: info:  [5] successful run completed in 30.1s\n"


def soak_programs(retries=0):
    progs = programs.stress_programs(30, 2)
    for p in progs:
        p.retries = retries
    return progs


def test_fork_stress_programs_are_found():
    progs = soak_programs()
    assert [p.name for p in progs if fork_stress.is_program(p)] == [
        "fork_stress", "fork_stress_memcg", "fork_stress_faults"]
    assert all(fork_stress.expects_async(p) for p in progs if fork_stress.is_program(p))
    p = suite.Program("x", 1, "sysctl -qw vm.async_fork=0 && /b/fork_stress -t 5 -k")
    assert fork_stress.is_program(p) and not fork_stress.expects_async(p)


def test_counters_sum_over_runs_and_failed_runs():
    progs = soak_programs(retries=1)
    run = suite_run(progs, {
        "fork_stress": FORK_STRESS_OUT,
        "fork_stress_memcg": FORK_STRESS_OLD.replace("57 children (3", "20 children (0")
                             + stress_line(20, 18, 5, 50),
        "fork_stress_faults": FORK_STRESS_MISMATCH,
        "stress-ng": STRESS_NG_OK}, failed={"fork_stress_memcg": [
            "not ok 1 snapshots exact: 1 of 7 children found a difference\n"
            + stress_line(7, 6, 1, 9)]})
    runs = fork_stress.runs(run, progs)
    assert [(r["program"], r["run"]) for r in runs] == [
        ("fork_stress", 1), ("fork_stress_memcg", 1), ("fork_stress_memcg", 2),
        ("fork_stress_faults", 1)]
    assert fork_stress.total(runs, "forks") == 290 + 7 + 20 + 41
    assert fork_stress.total(runs, "forks_deferred") == 261 + 6 + 18 + 37
    assert fork_stress.total(runs, "syncs") == 1204 + 1 + 5 + 88
    assert fork_stress.total(runs, "children_checked") == 290 + 7 + 20 + 41
    problems = fork_stress.judge(run, progs, runs)
    # fork_stress_faults found a mismatch: the suite's judgement stands.
    assert problems["fork_stress_faults"] and not problems["fork_stress"]
    assert not problems["fork_stress_memcg"] and not problems["stress-ng"]


def test_run_that_deferred_nothing_fails():
    progs = soak_programs()
    run = suite_run(progs, {"fork_stress": FORK_STRESS_OUT,
                            "fork_stress_memcg": FORK_STRESS_OLD + stress_line(57, 0),
                            "fork_stress_faults": FORK_STRESS_OUT,
                            "stress-ng": STRESS_NG_OK})
    runs = fork_stress.runs(run, progs)
    problems = fork_stress.judge(run, progs, runs)
    assert [n for n, v in problems.items() if v] == ["fork_stress_memcg"]
    assert "deferred nothing in 57 forks" in problems["fork_stress_memcg"][0]
    # Without -a nothing is expected: the same output passes.
    for r in runs:
        r["expect_async"] = False
    assert not any(fork_stress.judge(run, progs, runs).values())


def make_record(tmp_path, run, progs, problems, runs):
    kdir = tmp_path / "kasan"
    kdir.mkdir()
    (kdir / ".config").write_text("CONFIG_KASAN=y\nCONFIG_LOCALVERSION=\"-kasan\"\n")
    rec = soak_record.make_record(
        kernel_name="kasan", kernel_dir=kdir, run=run, progs=progs, problems=problems,
        runs=runs, started=1795600000.0, finished=1795607300.4,
        machine_info=results.machine(3, "4G", 2, "loop"),
        argv=["--kernel", "kasan", "--minutes", "120"],
        args={"kernel": "kasan", "minutes": 120.0})
    return rec, kdir


REQUIRED = {"kernel": str, "config": dict, "commit": str, "seconds": float,
            "forks": int, "forks_deferred": int, "syncs": int, "children_checked": int,
            "kernel_reports": int, "failures": int, "machine": dict, "args": dict}


def test_record_fields_and_file(tmp_path):
    progs = soak_programs()
    oops = ("[  812.1] ==================================================================\n"
            "[  812.1] BUG: KASAN: slab-use-after-free in af_sync+0x2c1/0x3a0\n")
    run = suite_run(progs, {"fork_stress": FORK_STRESS_OUT,
                            "fork_stress_memcg": FORK_STRESS_OUT,
                            "fork_stress_faults": FORK_STRESS_MISMATCH,
                            "stress-ng": STRESS_NG_OK}, console=oops)
    runs = fork_stress.runs(run, progs)
    problems = fork_stress.judge(run, progs, runs)
    rec, kdir = make_record(tmp_path, run, progs, problems, runs)
    for key, typ in REQUIRED.items():
        assert isinstance(rec[key], typ), (key, rec[key])
    assert rec["kernel"] == "6.12.117-asyncfork-kasan"
    assert rec["config"] == {"flavour": "kasan", "sha256": hashlib.sha256(
        (kdir / ".config").read_bytes()).hexdigest()}
    assert rec["commit"] == vm.git_describe()
    assert rec["seconds"] == 7300.4
    assert (rec["forks"], rec["forks_deferred"], rec["syncs"]) == (621, 559, 2496)
    assert rec["children_checked"] == 621
    assert rec["kernel_reports"] == 1 and rec["failures"] == 1 and rec["passed"] is False
    m = rec["machine"]
    assert m["host"] in ("native", "vm") and m["accel"] in ("kvm", "tcg")
    assert m["host_cpu"] and m["guest_cpus"] == 3 and m["guest_memory"] == "4G"
    assert rec["args"]["argv"] == ["--kernel", "kasan", "--minutes", "120"]
    assert rec["programs"]["fork_stress_faults"]["passed"] is False

    first = soak_record.write_record(rec, tmp_path / "results", "kasan")
    again = soak_record.write_record(rec, tmp_path / "results", "kasan")
    assert first.name == "soak-kasan-2026-11-25.json"
    assert again.name == "soak-kasan-2026-11-25-2.json"
    assert json.loads(first.read_text()) == rec


def test_record_counters_null_without_counter_line(tmp_path):
    progs = soak_programs()
    run = suite_run(progs, {n: FORK_STRESS_OLD for n in
                            ("fork_stress", "fork_stress_memcg", "fork_stress_faults")})
    runs = fork_stress.runs(run, progs)
    rec, _ = make_record(tmp_path, run, progs, fork_stress.judge(run, progs, runs), runs)
    assert rec["forks"] is None and rec["forks_deferred"] is None and rec["syncs"] is None
    assert rec["children_checked"] == 3 * 57
    assert json.loads(json.dumps(rec))["forks"] is None


def test_kernel_names():
    assert soak.kernel_dir("kasan") == BUILD / "kasan"
    assert soak.kernel_dir("debug") == BUILD / "debug"
    assert soak.kernel_dir("/x/build/kcsan") == Path("/x/build/kcsan")


def test_missing_kernel_is_refused_without_a_record(tmp_path):
    p = subprocess.run(asyncfork_command("soak") + [
                           "--kernel", str(tmp_path / "nokernel"),
                           "--record-dir", str(tmp_path / "rec")],
                       capture_output=True, text=True, timeout=60, cwd=TOP, check=False)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "no kernel image" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "rec").exists()


def test_missing_package_is_refused_without_a_record(tmp_path):
    """make soak KERNEL=deb before make deb: a clear error, no record."""
    p = subprocess.run(asyncfork_command("soak") + [
                           "--kernel", "deb", "--flavour", "no-such-flavour",
                           "--record-dir", str(tmp_path / "rec")],
                       capture_output=True, text=True, timeout=60, cwd=TOP, check=False)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "no linux-image package" in p.stderr and "make deb" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
    assert not (tmp_path / "rec").exists()


@pytest.mark.parametrize("bad", [["--minutes", "0"], ["--timeout-factor", "0.5"]])
def test_bad_soak_arguments(bad, tmp_path):
    p = subprocess.run(asyncfork_command("soak") + ["--kernel", str(tmp_path), *bad],
                       capture_output=True, text=True,
                       timeout=60, cwd=TOP, check=False)
    assert p.returncode == 2 and bad[0] in p.stderr, p.stderr


@pytest.mark.parametrize("memcg_out,rc", [(FORK_STRESS_OUT, 0),
                                          (FORK_STRESS_OLD + stress_line(57, 0), 1)])
def test_soak_exit_code_and_record(monkeypatch, tmp_path, capsys, memcg_out, rc):
    """The whole of soak.main() with the boot replaced by its results: it
    exits non-zero when a run expected Async-fork and deferred nothing, and
    writes its record either way."""
    kdir = tmp_path / "build/kasan"
    (kdir / "arch/x86/boot").mkdir(parents=True)
    (kdir / "arch/x86/boot/bzImage").write_bytes(b"MZ")
    (kdir / ".config").write_text("CONFIG_KASAN=y\n")
    seen = {}

    def fake_run_suite(kernel, progs, outdir, **kw):
        seen.update(kernel=kernel, timeouts={p.name: p.timeout for p in progs}, **kw)
        return suite_run(progs, {"fork_stress": FORK_STRESS_OUT,
                                 "fork_stress_memcg": memcg_out,
                                 "fork_stress_faults": FORK_STRESS_OUT,
                                 "stress-ng": STRESS_NG_OK})

    monkeypatch.setattr(soak.harness, "run_suite", fake_run_suite)
    monkeypatch.setattr(soak.programs, "missing", lambda progs: [])
    argv = ["--kernel", str(kdir), "--minutes", "120", "--record-dir", str(tmp_path / "rec")]
    assert soak.main(argv) == rc
    assert seen["kernel"] == kdir and seen["cpus"] == 3 and seen["boot_timeout"] == 360
    # Multi-threaded TCG unless asked (--tcg-single), and the record says so.
    assert seen["tcg_single"] is False
    # kasan: twice the suite's timeouts (2 * 1440 + 240 for fork_stress).
    assert seen["timeouts"]["fork_stress"] == 2 * (2 * 1440 + 240)
    rec_file, = (tmp_path / "rec").glob("soak-kasan-*.json")
    rec = json.loads(rec_file.read_text())
    assert rec["failures"] == rc and rec["passed"] is (rc == 0)
    assert rec["args"]["argv"] == argv and rec["args"]["minutes"] == 120
    assert rec["forks"] == 290 * 2 + (290 if rc == 0 else 57)
    assert f"record {rec_file}" in capsys.readouterr().out
    if rc == 0:
        monkeypatch.setenv("ASYNC_FORK_ACCEL", "tcg")
        rec_file.unlink()
        assert soak.main(argv + ["--tcg-single"]) == 0
        assert seen["tcg_single"] is True
        rec = json.loads(next((tmp_path / "rec").glob("soak-kasan-*.json")).read_text())
        assert rec["machine"]["tcg_threads"] == "single" and rec["args"]["tcg_single"] is True


def test_soak_time_is_shared_as_the_programs_take_it():
    # stress-ng runs two stressors one after the other: two shares of the
    # time, which the timed programs get whole, so that a 120-minute soak
    # lasts at least 120 minutes (one of 116.5 min did not count).
    seconds, snapshots, progs = soak.soak_programs(120, packaged=False)
    names = [p.name for p in progs]
    assert "fork_stress_faults" in names and seconds == 7200 // 5
    # The package's kernel has no fault injection: that program would bail
    # out and fail the soak, so it is left out and the others get its time.
    seconds, _, progs = soak.soak_programs(120, packaged=True)
    assert "fork_stress_faults" not in [p.name for p in progs]
    assert seconds == 7200 // 4
    assert {"fork_stress", "fork_stress_memcg", "stress-ng", "redis_digest"} <= {
        p.name for p in progs}


def test_host_package_change_during_a_run_is_flagged(tmp_path):
    status = tmp_path / "status"
    status.write_text("a")
    before = soak.packages_stamp(status)
    assert soak.host_changed_note(before, soak.packages_stamp(status)) is None
    os.utime(status, (before + 60, before + 60))
    note = soak.host_changed_note(before, soak.packages_stamp(status))
    assert note and "host's packages changed during the run" in note
    assert soak.packages_stamp(tmp_path / "none") is None


def test_machine_says_how_tcg_ran_the_vcpus(monkeypatch):
    # make test-deb and soak KERNEL=deb run TCG guests on one host thread
    # (vm.run's tcg_single): their records must say so, and only theirs.
    monkeypatch.setenv("ASYNC_FORK_ACCEL", "tcg")
    assert results.machine(3, "4G", 2, "zram", tcg_single=True)["tcg_threads"] == "single"
    assert results.machine(3, "4G", 2, "zram")["tcg_threads"] == "multi"
    assert results.machine()["tcg_threads"] is None
    monkeypatch.setenv("ASYNC_FORK_ACCEL", "kvm")
    kvm = results.machine(3, "4G", 2, "zram", tcg_single=True)
    assert kvm["accel"] == "kvm" and kvm["tcg_threads"] is None
