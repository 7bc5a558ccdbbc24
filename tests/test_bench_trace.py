# SPDX-License-Identifier: GPL-2.0
"""The demo's reading of the tracepoints (asyncfork.tracing Trace and
asyncfork.demo syscall_summary), on tracefs text of the kernel's own
formats: the server's proactive synchronizations, its child's copy and the
syscalls of its main thread, each attributed to the right task, and a
syscall stall that must show as the longest besides fork()."""



import os
import subprocess
import time

import pytest

from asyncfork import demo, native, snapshot, tracing

PID = 4242
TRACE = """\
# tracer: nop
#
    redis-server-4242    [000] .....   100.000000: sys_enter: NR 56 (1200011, 0, 0, 7f0, 0, 0)
    redis-server-4242    [000] .....   100.030000: async_fork_start: mm=00000000aaaa child_mm=00000000bbbb links=3 pmds=512
    redis-server-4242    [000] .....   100.031000: sys_exit: NR 56 = 4243
    redis-server-4242    [000] .....   100.031100: sys_enter: NR 257 (ffffff9c, 55d0, 441, 1b6, 0, 0)
    redis-server-4242    [000] .....   100.031200: sys_exit: NR 257 = 7
    redis-server-4242    [000] .....   100.031300: sys_enter: NR 9 (0, 1000, 3, 22, ffffffffffffffff, 0)
    redis-server-4242    [000] .....   100.389300: sys_exit: NR 9 = 140000000
    redis-server-4242    [000] .....   100.389400: sys_enter: NR 1 (7, 55d0, 40, 0, 0, 0)
    redis-server-4242    [000] .....   100.389500: async_fork_sync: mm=00000000aaaa range=0x7f0000000000-0x7f0000200000 pmds=1 vma_wide=0 duration_ns=1250000
    redis-server-4242    [000] .....   100.391000: sys_exit: NR 1 = 64
    redis-server-4243    [001] .....   100.500000: async_fork_child_done: child_mm=00000000bbbb pmds=511 threads=1 duration_ns=470000000 err=0
    redis-server-4243    [001] .....   100.500100: sys_enter: NR 9 (0, 1000, 3, 22, ffffffffffffffff, 0)
    redis-server-4243    [001] .....   100.900100: sys_exit: NR 9 = 140000000
    other-7              [001] .....   100.600000: async_fork_sync: mm=00000000cccc range=0x1000-0x200000 pmds=1 vma_wide=0 duration_ns=9000000
"""


def fake_tracefs(root):
    (root / "trace").write_text(TRACE)
    (root / "tracing_on").write_text("1")
    for e in tracing.Trace.EVENTS:
        (root / "events/async_fork" / e).mkdir(parents=True)
    for e in tracing.Trace.RAW:
        (root / "events/raw_syscalls" / e).mkdir(parents=True)


def test_trace_reads_server_events_and_syscalls(tmp_path, monkeypatch):
    monkeypatch.setattr(tracing.Trace, "DIR", tmp_path)
    fake_tracefs(tmp_path)
    t = tracing.Trace(True)
    assert t.ok and t.syscalls
    # The events go on once, before the run, recording off and nothing
    # passing the filter: start() and stop() must patch no kernel text.
    enable = tmp_path / "events/raw_syscalls/sys_exit/enable"
    assert enable.read_text() == "1"
    assert (tmp_path / "tracing_on").read_text() == "0"
    assert (tmp_path / "events/raw_syscalls/sys_enter/filter").read_text() == \
        "common_pid == 0 && id == -1"
    enable.write_text("unchanged")
    t.start(PID)
    filt = (tmp_path / "events/raw_syscalls/sys_enter/filter").read_text()
    assert filt.startswith(f"common_pid == {PID} && ") and "id != 232" in filt
    (tmp_path / "trace").write_text(TRACE)     # start() emptied it
    ev = t.stop(PID)
    assert enable.read_text() == "unchanged"
    assert (tmp_path / "tracing_on").read_text() == "0"

    assert [f["pmds"] for f in ev["forks"]] == [512]
    # Only the server's mm: the other process's sync is not an interruption.
    assert [s["duration_ns"] for s in ev["syncs"]] == [1250000]
    assert [c["duration_ns"] for c in ev["child"]] == [470000000]
    # The child's mmap (another task) is not the server's.
    assert ev["syscalls"]["mmap"]["count"] == 1
    assert set(ev["syscalls"]) == {"clone", "openat", "mmap", "write"}

    sc = demo.syscall_summary(ev)
    assert sc["longest"] == "mmap"
    assert abs(sc["longest_ms"] - 358.0) < 1e-6
    assert sc["mmap_lock_calls"] == 1
    assert abs(sc["mmap_lock_max_ms"] - 358.0) < 1e-6
    assert sc["calls"] == 4


def test_no_syscall_trace_is_not_a_clean_one(tmp_path, monkeypatch):
    # A kernel without syscall tracepoints: no summary rather than "no stall".
    monkeypatch.setattr(tracing.Trace, "DIR", tmp_path)
    fake_tracefs(tmp_path)
    for e in tracing.Trace.RAW:
        (tmp_path / "events/raw_syscalls" / e).rmdir()
    (tmp_path / "events/raw_syscalls").rmdir()
    t = tracing.Trace(True)
    t.start(PID)
    (tmp_path / "trace").write_text(TRACE)
    ev = t.stop(PID)
    assert ev["syscalls"] is None
    assert demo.syscall_summary(ev) is None
    assert len(ev["syncs"]) == 1


def test_syscalls_before_the_snapshot_do_not_count(tmp_path, monkeypatch):
    # Tracing starts before BGSAVE; what the server did before it is not
    # part of the snapshot, while the fork's events still are read.
    monkeypatch.setattr(tracing.Trace, "DIR", tmp_path)
    fake_tracefs(tmp_path)
    t = tracing.Trace(True)
    t.start(PID)
    (tmp_path / "trace").write_text(TRACE)
    ev = t.stop(PID, since_ns=1 << 62)
    assert ev["syscalls"] == {}
    assert len(ev["syncs"]) == 1 and len(ev["forks"]) == 1


def test_attribute_without_tracefs_is_unavailable(tmp_path):
    # --attribute on a kernel without tracefs: refused at once, nothing made.
    settings = native.Settings(tmp_path)
    with pytest.raises(tracing.Unavailable, match="no tracefs"):
        tracing.Trace(True, settings, attribute=True)
    assert not settings.changed


class Done:
    """A server whose BGSAVE is already done when asked."""
    asked = 0

    def info(self, section):
        self.asked += 1
        return {"rdb_bgsave_in_progress": 0}


def test_wait_snapshot_sleeps_until_the_child_exits():
    # The harness's own "snapshot child": forked by this (main) thread.
    me = os.getpid()
    before = snapshot.children_of(me)
    child = subprocess.Popen(["sleep", "0.5"])
    try:
        assert child.pid in snapshot.children_of(me) - before
        r, t0 = Done(), time.monotonic()
        snapshot.wait_snapshot(r, me, before)
        # Asleep on the pidfd, then one question: not every 50 ms.
        assert time.monotonic() - t0 >= 0.4 and r.asked == 1
        assert child.poll() is not None
    finally:
        child.kill()
        child.wait()
    # No child to wait for: the server is asked at once.
    r = Done()
    snapshot.wait_snapshot(r, me, snapshot.children_of(me))
    assert r.asked == 1
