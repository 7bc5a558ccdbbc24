# SPDX-License-Identifier: GPL-2.0
"""A guest run says what it does as it goes: each program's start and
result with its time, from the files tests/guest/run-suite.sh leaves in
the shared results folder; the soak adds a heartbeat with its counters.
Host-only: the guest is replaced by what it writes."""

from pathlib import Path

from asyncfork import soak, suite, vm


def test_progress_from_the_guest_files(tmp_path):
    clock = iter(range(100, 1000, 10))
    p = suite.Progress(tmp_path, ["fork_snapshot", "khugepaged"], clock=lambda: next(clock))
    assert p.poll() == [] and p.current is None
    (tmp_path / "fork_snapshot.dmesg").touch()
    assert p.poll() == ["[1/2] fork_snapshot ..."]
    assert p.current == "fork_snapshot" and p.poll() == []
    (tmp_path / "fork_snapshot.out.failed1").touch()
    assert p.poll() == ["[1/2] fork_snapshot: run 1 failed, run 2 started"]
    # An exit code not written yet is no result.
    (tmp_path / "fork_snapshot.rc").write_text("")
    assert p.poll() == []
    (tmp_path / "fork_snapshot.time").write_text("1700000000.25 1700000075.5\n")
    (tmp_path / "fork_snapshot.rc").write_text("0\n")
    # The next program's start and result in the same poll.
    (tmp_path / "khugepaged.dmesg").touch()
    (tmp_path / "khugepaged.rc").write_text("124\n")
    assert p.poll() == ["[1/2] fork_snapshot: exit 0 after 1:15 min",
                        "[2/2] khugepaged ...",
                        "[2/2] khugepaged: timed out after 10 s"]
    assert [(f.name, f.rc) for f in p.finished] == [("fork_snapshot", 0), ("khugepaged", 124)]
    assert p.poll() == [] and p.current is None


def fake_guest(outdir: Path, names: list[str], rcs: dict[str, int]):
    """A vm.run that leaves what run-suite.sh leaves for each program."""
    def run(kernel, cmd, **kw):
        for name in names:
            (outdir / f"{name}.dmesg").write_text("")
            (outdir / f"{name}.out").write_text("ok 1 fine\n")
            (outdir / f"{name}.time").write_text("10 13\n")
            (outdir / f"{name}.rc").write_text(f"{rcs.get(name, 0)}\n")
        (outdir / "console.log").write_text("")
        return vm.VMResult(0, False, 5.0, "", outdir / "console.log")
    return run


def test_run_suite_echoes_each_program(tmp_path, monkeypatch):
    outdir = tmp_path / "results"
    progs = [suite.Program("fork_snapshot", 60, "true"), suite.Program("mremap", 60, "false")]
    monkeypatch.setattr(vm, "run", fake_guest(outdir, ["sysctl-vm.async_fork",
                                                       "fork_snapshot", "mremap"],
                                              {"mremap": 1}))
    lines = []
    run = suite.run_suite(tmp_path / "kernel", progs, outdir, sysctls={"vm.async_fork": "2"},
                          echo=lines.append)
    assert lines[0].startswith(f"booting {tmp_path / 'kernel'} for 3 programs")
    assert lines[1:] == ["[1/3] sysctl-vm.async_fork ...",
                         "[1/3] sysctl-vm.async_fork: exit 0 after 3 s",
                         "[2/3] fork_snapshot ...", "[2/3] fork_snapshot: exit 0 after 3 s",
                         "[3/3] mremap ...", "[3/3] mremap: exit 1 after 3 s"]
    assert run.results["mremap"].rc == 1


def test_run_suite_quiet(tmp_path, monkeypatch, capsys):
    outdir = tmp_path / "results"
    monkeypatch.setattr(vm, "run", fake_guest(outdir, ["a"], {}))
    suite.run_suite(tmp_path, [suite.Program("a", 60, "true")], outdir, echo=None)
    assert capsys.readouterr().out == ""


def test_heartbeat_is_called():
    class Still:
        def poll(self):
            return []
    lines = []
    w = suite.Watch(Still(), lines.append, heartbeat=lambda p: "beat", every=0.001)
    w.beat -= 1
    w.tick()
    assert lines == ["beat"]


FORK_STRESS_DONE = ("ok 1 snapshots exact: 290 children\n"
                    "fork_stress: forks 290, deferred 261 (90%), syncs 1204, "
                    "child copies 5230, errors 0\n")


def test_soak_heartbeat(tmp_path):
    (tmp_path / "fork_stress.out").write_text(FORK_STRESS_DONE)
    (tmp_path / "fork_stress_memcg.out").write_text("still running\n")
    (tmp_path / "console.log").write_text(
        "[ 1.0] run-suite: fork_stress (run 1)\n"
        "[ 9.0] WARNING: CPU: 1 PID: 7 at mm/memory.c:1 f+0x1/0x2\n")
    p = suite.Progress(tmp_path, ["fork_stress", "fork_stress_memcg", "stress-ng"])
    p.finished = [suite.Finished("fork_stress", 0, 100.0)]
    p.next, p.started = 1, p.clock() - 30
    line = soak.heartbeat_line(p, tmp_path, elapsed=725, minutes=30)
    assert line.startswith("heartbeat 12:05 of about 30:00: fork_stress_memcg running (30 s), "
                           "1 of 3 done, 0 exited non-zero"), line
    assert "forks 261 of 290 deferred, 290 children checked" in line
    assert line.endswith("kernel reports 1")
