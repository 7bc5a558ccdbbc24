# SPDX-License-Identifier: GPL-2.0
"""--attribute's analysis (asyncfork.attribution) on tracefs text: traces
written here in the kernel's own formats, each with one known delay, and a
real trace from a guest run of the lean kernel (tests/data/), trimmed.  A
delay must be given to its cause with its duration, a wait for a CPU must
name who had it, the causes of every request must add up to its latency,
and lost events must be reported and never analysed past."""

import json

import pytest
from conftest import BUILD, TOP

from asyncfork import attribution
from asyncfork import native
from asyncfork import demo, loadgen

SERVER, LOADGEN, CHILD = 100, 200, 300
MS = 1_000_000


def line(ts: float, event: str, rest: str, pid: int = SERVER, comm: str = "redis-server",
         cpu: int = 0) -> str:
    return f"{comm:>16}-{pid:<7} [{cpu:03d}] d.... {ts:12.6f}: {event}: {rest}"


def switch(ts, prev, prev_comm, state, nxt, next_comm, cpu=0):
    return line(ts, "sched_switch", f"prev_comm={prev_comm} prev_pid={prev} prev_prio=120 "
                f"prev_state={state} ==> next_comm={next_comm} next_pid={nxt} "
                f"next_prio=120", pid=prev, comm=prev_comm, cpu=cpu)


def wakeup(ts, pid, comm, cpu=0, by=0):
    return line(ts, "sched_wakeup", f"comm={comm} pid={pid} prio=120 target_cpu={cpu:03d}",
                pid=by, comm="<idle>", cpu=cpu)


def enter(ts, nr):
    return line(ts, "sys_enter", f"NR {nr} (0, 0, 0, 0, 0, 0)")


def leave(ts, nr, ret=0):
    return line(ts, "sys_exit", f"NR {nr} = {ret}")


def fault(ts, code):
    return line(ts, "page_fault_user", f"address=0x7f0000001000 ip=0x55d000 "
                f"error_code=0x{code:x}")


def fault_ret(ts, ret=0, caller="do_user_addr_fault+0x2de/0x4c9"):
    return line(ts, "fault_ret", f"({caller} <- handle_mm_fault) ret=0x{ret:x}")


def sync(ts, duration_ns, pid=SERVER):
    return line(ts, "async_fork_sync", f"mm=00000000aaaa range=0x7f0000000000-0x7f0000200000 "
                f"pmds=1 vma_wide=0 duration_ns={duration_ns}", pid=pid)


# The trace goes on past the requests (the run stops it later).
END = switch(20.0, 77, "kworker/3:0", "I", 0, "swapper/3", cpu=3)


def timeline(lines, loadgen=LOADGEN, stats=None):
    events, lost = attribution.parse(lines + [END])
    cut = attribution.lost_after(events, stats or {}, lost)
    return attribution.Timeline(events, SERVER, loadgen, cut)


def ms(causes: dict) -> dict:
    return {k: round(v / MS, 3) for k, v in causes.items() if v}


def at(s: float) -> int:
    return round(s * 1e9)


def check_sums(tl, a, b):
    causes = tl.breakdown(a, b)
    assert sum(causes.values()) == b - a
    return ms(causes)


# --- one known delay each ------------------------------------------------

def test_a_sync_inside_a_fault_is_its_own_time_only():
    # The server runs from 9.999; a write fault on a present page at 10.000
    # synchronizes for 3 ms (10.0010-10.0040) and the fault returns at
    # 10.0045: 3 ms of sync; the 1.5 ms around it are the fault's own (the
    # COW of the page, which the default fork would have caused too).
    tl = timeline([
        switch(9.999, 0, "swapper/0", "R", SERVER, "redis-server"),
        fault(10.000, 0x7),
        sync(10.004, 3 * MS),
        fault_ret(10.0045),
    ])
    got = check_sums(tl, at(9.9995), at(10.006))
    assert got == {"user space": 2.0, "fault: sync": 3.0, "fault: COW": 1.5}


def test_cow_and_other_faults_by_error_code_and_a_retry_is_one_fault():
    tl = timeline([
        switch(9.999, 0, "swapper/0", "R", SERVER, "redis-server"),
        fault(10.000, 0x7),                 # present + write + user: COW
        fault_ret(10.002, 0x400),           # per-VMA lock: retried under mmap_lock
        fault_ret(10.003),
        fault(10.005, 0x6),                 # not present: other
        fault_ret(10.006),
        # get_user_pages' own call closes no fault
        fault(10.007, 0x4),
        fault_ret(10.0075, caller="__get_user_pages+0xa5f/0xc31"),
        fault_ret(10.008),
    ])
    assert check_sums(tl, at(10.0), at(10.01)) == {
        "fault: COW": 3.0, "fault: other": 2.0, "user space": 5.0}


def test_a_sync_outside_a_fault_and_the_fork():
    tl = timeline([
        switch(9.999, 0, "swapper/0", "R", SERVER, "redis-server"),
        enter(10.000, 56),
        leave(10.012, 56, CHILD),
        enter(10.020, 28),                   # madvise, synchronizing for 2 ms
        sync(10.023, 2 * MS),
        leave(10.024, 28),
    ])
    assert check_sums(tl, at(10.0), at(10.025)) == {
        "syscall: clone (fork)": 12.0, "user space": 9.0, "syscall: madvise": 2.0,
        "sync outside a fault": 2.0}
    assert tl.thread.children == {CHILD}
    assert tl.thread.forks == [(at(10.0), at(10.012))]


def test_a_wait_for_the_cpu_names_who_ran():
    # Preempted at 10.001 on CPU 1: the snapshot child runs 4 ms, a copy
    # helper 2 ms, a kworker 1 ms, then the server again.
    tl = timeline([
        switch(9.999, 0, "swapper/1", "R", SERVER, "redis-server", cpu=1),
        enter(10.0, 56), leave(10.0005, 56, CHILD),
        switch(10.001, SERVER, "redis-server", "R+", CHILD, "redis-server", cpu=1),
        switch(10.005, CHILD, "redis-server", "R+", 301, "async_fork", cpu=1),
        switch(10.007, 301, "async_fork", "S", 55, "kworker/1:2", cpu=1),
        switch(10.008, 55, "kworker/1:2", "I", SERVER, "redis-server", cpu=1),
    ])
    assert check_sums(tl, at(10.001), at(10.009)) == {
        "runnable: the snapshot child": 4.0, "runnable: a copy helper": 2.0,
        "runnable: a kworker": 1.0, "user space": 1.0}


def child_done(ts, duration_ns, pid=CHILD):
    return line(ts, "async_fork_child_done", f"child_mm=00000000bbbb pmds=8 threads=1 "
                f"duration_ns={duration_ns} err=0", pid=pid, cpu=1)


def test_a_wait_behind_the_child_is_its_copy_only_while_it_copies():
    # The child copies its tables from 10.001 to 10.003, then runs the
    # snapshot: of the server's 4 ms wait behind it, 2 ms are Async-fork's.
    tl = timeline([
        switch(9.999, 0, "swapper/1", "R", SERVER, "redis-server", cpu=1),
        enter(10.0, 56), leave(10.0005, 56, CHILD),
        switch(10.001, SERVER, "redis-server", "R+", CHILD, "redis-server", cpu=1),
        child_done(10.003, 2 * MS),
        switch(10.005, CHILD, "redis-server", "R+", SERVER, "redis-server", cpu=1),
    ])
    assert check_sums(tl, at(10.0), at(10.006)) == {
        "syscall: clone (fork)": 0.5, "user space": 1.5,
        "runnable: the snapshot child copying tables": 2.0,
        "runnable: the snapshot child": 2.0}


def test_the_forks_own_work_per_request():
    # fork() 3 ms, later a 0.6 ms sync, then 1.5 ms behind the copying child.
    tl = timeline([
        switch(9.999, 0, "swapper/1", "R", SERVER, "redis-server", cpu=1),
        enter(10.000, 56), leave(10.003, 56, CHILD),
        fault(10.010, 0x7), sync(10.0106, MS * 6 // 10), fault_ret(10.0107),
        switch(10.020, SERVER, "redis-server", "R+", CHILD, "redis-server", cpu=1),
        child_done(10.0215, 3 * MS),
        switch(10.0215, CHILD, "redis-server", "R+", SERVER, "redis-server", cpu=1),
    ])
    reqs = [(at(9.9995), at(10.0035), "S"),     # over the fork: 3 ms of it
            (at(10.0099), at(10.0108), "S"),    # the sync: 0.6 ms
            (at(10.0195), at(10.0220), "G"),    # behind the child: 1.5 ms
            (at(10.0300), at(10.0301), "G")]    # nothing of it
    att = attribution.attribute(tl, reqs, (at(9.99), at(10.1)), 10 * MS)
    own = att["own"]
    assert own["requests"] == 4 and own["over_limit"] == 2
    assert own["max_ms"] == pytest.approx(3.0)
    assert own["max_causes_ms"] == pytest.approx({"syscall: clone (fork)": 3.0})
    assert own["max_without_fork_ms"] == pytest.approx(1.5)
    line, = attribution.own_lines("async", att)
    assert "delayed 2 of 4 requests by over 1 ms; at most 3.00 ms" in line
    assert "without fork() itself at most 1.50 ms" in line


def test_woken_but_waiting_while_the_load_generator_runs():
    # Asleep in epoll_wait, woken at 10.002 onto CPU 0, where loadgen runs
    # until 10.005: the wait is the load generator's.
    tl = timeline([
        switch(9.999, 0, "swapper/0", "R", SERVER, "redis-server"),
        enter(10.0, 232),
        switch(10.001, SERVER, "redis-server", "S", LOADGEN, "loadgen"),
        wakeup(10.002, SERVER, "redis-server", by=LOADGEN),
        switch(10.005, LOADGEN, "loadgen", "S", SERVER, "redis-server"),
        leave(10.0052, 232, 1),
    ])
    assert check_sums(tl, at(10.0015), at(10.006)) == {
        "client: load generator running": 0.5, "runnable: the load generator": 3.0,
        "syscall: epoll_wait": 0.2, "user space": 0.8}


def test_idle_server_and_a_late_load_generator_are_the_client_side():
    # The server sleeps in epoll_wait from 10.000; loadgen waits for CPU 1
    # (woken at 10.001, runs at 10.004) while the child has it.
    tl = timeline([
        switch(9.999, 0, "swapper/0", "R", SERVER, "redis-server"),
        switch(9.999, LOADGEN, "loadgen", "S", CHILD, "redis-rdb-bgsave", cpu=1),
        enter(10.0, 232),
        switch(10.0, SERVER, "redis-server", "S", 0, "swapper/0"),
        wakeup(10.001, LOADGEN, "loadgen", cpu=1),
        switch(10.004, CHILD, "redis-rdb-bgsave", "R+", LOADGEN, "loadgen", cpu=1),
        wakeup(10.0045, SERVER, "redis-server", by=LOADGEN),
        switch(10.0046, 0, "swapper/0", "R", SERVER, "redis-server"),
        leave(10.0048, 232, 1),
    ])
    assert check_sums(tl, at(10.0), at(10.005)) == {
        "client: load generator sleeping": 1.0, "client: load generator runnable": 3.0,
        "client: load generator running": 0.5, "runnable: CPU idle (wake-up latency)": 0.1,
        "syscall: epoll_wait": 0.2, "user space": 0.2}


def test_mmap_lock_wait_asleep_is_the_lock():
    tl = timeline([
        switch(9.999, 0, "swapper/0", "R", SERVER, "redis-server"),
        enter(10.0, 9),                      # mmap
        line(10.001, "mmap_lock_start_locking", "mm=00000000aaaa memcg_path=/ write=true"),
        switch(10.0012, SERVER, "redis-server", "D", 0, "swapper/0"),
        wakeup(10.007, SERVER, "redis-server"),
        switch(10.0071, 0, "swapper/0", "R", SERVER, "redis-server"),
        line(10.0072, "mmap_lock_acquire_returned",
             "mm=00000000aaaa memcg_path=/ write=true success=true"),
        leave(10.008, 9),
    ])
    assert check_sums(tl, at(10.0), at(10.008)) == {
        "syscall: mmap": 1.8, "mmap_lock wait": 6.1, "runnable: CPU idle (wake-up latency)": 0.1}


def test_before_the_first_event_is_unexplained():
    tl = timeline([switch(10.0, 0, "swapper/0", "R", SERVER, "redis-server")])
    # Nothing is known of the server before its first event.
    assert check_sums(tl, at(9.990), at(10.002)) == {"unexplained": 10.0, "user space": 2.0}


# --- lost events ------------------------------------------------------------

LOSSY = [
    switch(9.999, 0, "swapper/0", "R", SERVER, "redis-server"),
    enter(10.000, 1),
    leave(10.001, 1),
    "CPU:0 [LOST 17 EVENTS]",
    enter(10.004, 1),
    leave(10.005, 1),
]


def test_lost_events_in_the_text_stop_the_analysis(tmp_path):
    path = tmp_path / "trace.txt"
    path.write_text("\n".join(LOSSY) + "\n")
    rec = {"server_pid": SERVER, "loadgen_pid": LOADGEN}
    reqs = [(at(10.0), at(10.006), "S")]
    att = attribution.analyse_trace(path, rec, reqs, (at(9.9), at(10.1)), 1 * MS)
    assert att["lost_events"] == 17
    # Past the last event before the loss nothing is attributed.
    assert att["complete_until_ns"] == at(10.005)
    assert att["slow"][0]["causes_ms"]["unexplained"] == pytest.approx(1.0)
    assert att["slow"][0]["causes_ms"]["syscall: write"] == pytest.approx(2.0)
    lines = attribution.warning_lines("async", att)
    assert any("lost 17 events" in x for x in lines)


def test_lost_events_from_the_buffer_statistics(tmp_path):
    # A full buffer (overwrite off) drops events without a LOST line: the
    # per-CPU "dropped events" count must stop the analysis all the same.
    path = tmp_path / "trace.txt"
    path.write_text("\n".join(x for x in LOSSY if "LOST" not in x) + "\n")
    rec = {"server_pid": SERVER, "loadgen_pid": LOADGEN,
           "cpu_stats": {"0": {"entries": 5, "overrun": 0, "dropped": 9}}}
    att = attribution.analyse_trace(path, rec, [(at(10.0), at(10.006), "S")],
                                    (at(9.9), at(10.1)), 1 * MS)
    assert att["lost_events"] == 9
    assert att["slow"][0]["causes_ms"]["unexplained"] == pytest.approx(1.0)


def test_cpu_stats_read_from_tracefs(tmp_path):
    d = tmp_path / "per_cpu/cpu1"
    d.mkdir(parents=True)
    (d / "stats").write_text("entries: 5839\noverrun: 3\ncommit overrun: 0\nbytes: 300804\n"
                             "oldest event ts:    20.687588\nnow ts:    28.824972\n"
                             "dropped events: 7\nread events: 0\n")
    assert attribution.cpu_stats(tmp_path) == {1: {"entries": 5839, "overrun": 3,
                                                   "dropped": 7}}


# --- clock, requests, report ----------------------------------------------

def test_clock_marker_inside_its_readings():
    marker = line(26.356885, "tracing_mark_write", f"{attribution.CLOCK_MARK} 1")
    events, _ = attribution.parse([marker])
    assert attribution.clock_offset(events, 26_356_000_000, 26_357_000_000) == 0
    # 87 ms later than the second reading: reported, not hidden.
    assert attribution.clock_offset(events, 26_200_000_000, 26_269_885_000) == 87_000_000
    assert attribution.clock_offset([], 1, 2) is None


def test_requests_in_the_monotonic_clock():
    header = {"start_realtime_ns": "1000000000500", "start_monotonic_ns": "500"}
    rows = [(1000000000500 + 2000, 1500.0, "S")]       # 2 us after the start, 1.5 ms
    assert attribution.requests_mono(rows, header) == [(2500, 2500 + 1_500_000, "S")]


def test_slow_requests_and_the_tail():
    tl = timeline([
        switch(9.999, 0, "swapper/0", "R", SERVER, "redis-server"),
        fault(10.000, 0x7), sync(10.009, 8 * MS), fault_ret(10.010),
    ])
    reqs = [(at(10.0) + i * 100_000, at(10.0105), "S") for i in range(5)] + \
        [(at(10.011) + i * 10_000, at(10.0111) + i * 10_000, "G") for i in range(200)]
    att = attribution.attribute(tl, reqs, (at(10.0), at(10.1)), 1 * MS)
    # Five requests over 2 ms, the slowest first, each given its fault:
    # 8 ms of synchronization, 2 ms of the fault around it.
    assert [round(r["latency_ms"], 1) for r in att["slow"]] == [10.5, 10.4, 10.3, 10.2, 10.1]
    assert att["slow"][0]["causes_ms"] == {"fault: sync": 8.0, "fault: COW": 2.0,
                                           "user space": 0.5}
    # The slowest 1% of 205 requests: two, 10.5 + 10.4 ms.
    assert att["tail_requests"] == 2
    tail = {r["cause"]: r["ms"] for r in att["tail"]}
    assert tail == pytest.approx({"fault: sync": 16.0, "fault: COW": 3.9, "user space": 1.0})
    lines = attribution.mode_table({"async": att})
    assert any(x.startswith("fault: sync") and "16.0" in x for x in lines)


# --- set-up: what the run adds to tracefs, and refusals -------------------

def test_kprobe_appended_and_removed(tmp_path):
    f = tmp_path / "kprobe_events"
    f.write_text("p:theirs/probe do_sys_open\n")
    s = native.Settings(tmp_path)
    s.append(f, attribution.KPROBE, attribution.KPROBE_REMOVE)
    assert f.read_text().splitlines() == ["p:theirs/probe do_sys_open", attribution.KPROBE]
    assert s.changed and "fault_ret" in s.describe()
    assert s.restore() == []
    # Their probe stays: only the run's own removal was appended.
    assert f.read_text().splitlines() == ["p:theirs/probe do_sys_open", attribution.KPROBE,
                                          attribution.KPROBE_REMOVE]


def test_missing_events_named(tmp_path):
    (tmp_path / "events/sched/sched_switch").mkdir(parents=True)
    missing = attribution.missing_events(tmp_path)
    assert "raw_syscalls/sys_enter" in missing and "sched/sched_switch" not in missing
    assert any("kprobe_events" in m for m in missing)
    assert any("async_fork" in m for m in missing)


def test_attribute_refused_natively_without_tracefs(tmp_path):
    root = tmp_path / "root"
    (root / "proc/sys/vm").mkdir(parents=True)
    (root / "proc/sys/vm/async_fork").write_text("1\n")
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    why = demo.attribute_unavailable(True, tmp_path, root)
    assert "no tracefs" in why
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before


def test_attribute_refused_for_a_guest_kernel_without_kprobes(tmp_path):
    (tmp_path / ".config").write_text("CONFIG_FTRACE=y\nCONFIG_EVENT_TRACING=y\n"
                                      "CONFIG_FTRACE_SYSCALLS=y\nCONFIG_ASYNC_FORK=y\n"
                                      "# CONFIG_KPROBE_EVENTS is not set\n")
    why = demo.attribute_unavailable(False, tmp_path)
    assert "CONFIG_KPROBE_EVENTS" in why and "CONFIG_KRETPROBES" in why


def test_the_lean_kernel_has_what_attribution_needs():
    # lean.config is a fragment (event tracing and kretprobes come with
    # what it sets): the built kernel's whole .config is what counts.
    config = BUILD / "lean/.config"
    if not config.exists():
        pytest.skip("build/lean is not built")
    assert attribution.config_missing(config) == []


# --- a real trace ------------------------------------------------------------
# tests/data/attribution: the Async-fork mode of a guest run of the lean
# kernel (make demo's --attribute, 256 MiB, QEMU TCG, 2 vCPUs), trimmed to
# 116.830-117.105 s of its trace (the fork, the server's synchronizations
# and the child's copy), and the requests sent and answered within it.

DATA = TOP / "tests/data/attribution"


def real():
    run = json.loads((DATA / "run.json").read_text())
    with open(DATA / "trace-async.txt") as f:
        events, lost = attribution.parse(f)
    rec = run["record"]
    tl = attribution.Timeline(events, rec["server_pid"], rec["loadgen_pid"])
    _, rows = loadgen.read_latency(DATA / "latency-async.txt")
    reqs = attribution.requests_mono(rows, attribution.read_header(DATA / "latency-async.txt"))
    return run, events, lost, tl, reqs


def test_real_trace_fork_child_and_syncs():
    run, events, lost, tl, _ = real()
    assert not lost
    # clone() from 116.856676 to 116.999426 returned the child, 88.
    assert tl.thread.forks == [(at(116.856676), at(116.999426))]
    assert tl.thread.children == {88}
    assert len(tl.syncs) == 43
    assert [round((b - a) / MS, 3) for a, b in tl.child_copy] == [189.79]
    # The run's clock check: the marker between its two readings.
    clock = run["record"]["clock"]
    assert attribution.clock_offset(events, clock["t1"], clock["t2"]) == 0


def test_real_trace_the_longest_sync_is_its_fault():
    _, _, _, tl, _ = real()
    # The server's write fault at 117.039994 synchronized for 12.022 ms
    # (async_fork_sync at 117.052024) and returned at 117.052123: the
    # tracepoint's 12.022 ms, and the fault's own 0.107 ms around it.
    assert ms(tl.breakdown(at(117.039994), at(117.052123))) == {"fault: sync": 12.022,
                                                                 "fault: COW": 0.107}
    # Another one, preempted inside by the harness (python, pid 78) and
    # kcompactd0 on its CPU: the wait names them; of the fault's 7.046 ms
    # on the CPU, its synchronization took 1.720.
    assert ms(tl.breakdown(at(117.031896), at(117.039302))) == {
        "fault: sync": 1.72, "fault: COW": 5.326, "runnable: other (python)": 0.315,
        "runnable: other (kcompactd0)": 0.045}


def test_real_requests_add_up_and_the_fork_is_theirs():
    _, _, _, tl, reqs = real()
    assert len(reqs) == 35
    over_fork = 0
    for a, b, _ in reqs:
        causes = tl.breakdown(a, b)
        assert sum(causes.values()) == b - a
        if a <= at(116.856676) and b >= at(116.999426):
            over_fork += 1
            # All of clone() but the 27 us it waited for the mmap_locks.
            assert round(causes["syscall: clone (fork)"] / MS, 3) == 142.723
            assert causes["mmap_lock wait"] >= 27_000
    assert over_fork == 23
    # The slowest request: 187.5 ms from 116.834185, of it 142.7 ms in fork()
    # and 7.2 ms in synchronizations.
    a, b, _ = max(reqs, key=lambda r: r[1] - r[0])
    got = ms(tl.breakdown(a, b))
    assert round((b - a) / MS, 4) == 187.5385
    assert got["syscall: clone (fork)"] == 142.723 and got["fault: sync"] == 7.207
    assert "unexplained" not in got


def test_real_trace_the_forks_own_work():
    _, _, _, tl, reqs = real()
    att = attribution.attribute(tl, reqs, (at(116.8), at(117.2)), 1 * MS)
    own = att["own"]
    # Every request of this early run (a 143 ms fork under a loaded host)
    # waited over 1 ms on it; the worst on fork() and two synchronizations.
    assert own["requests"] == 35 and own["over_limit"] == 35
    assert own["max_causes_ms"] == pytest.approx(
        {"syscall: clone (fork)": 142.723, "fault: sync": 9.803494})
    assert own["max_without_fork_ms"] == pytest.approx(9.803494)


def test_the_forks_own_work_table_over_configurations():
    own = {"requests": 10, "over_limit": 2, "limit_ms": 1.0, "max_ms": 4.5,
           "max_causes_ms": {}, "max_without_fork_ms": 0.75}
    lines = attribution.own_table([("1024M-set80-c1-t1", {"async": {"own": own},
                                                          "default": {"error": "not traced"}}),
                                   ("2048M-set80-c1-t1", {"async": {"error": "not traced"}})])
    assert len(lines) == 4 and "delayed over 1 ms" in lines[0]
    assert lines[1].split() == ["configuration", "|", "default", "|", "async"]
    assert lines[3].startswith("1024M-set80-c1-t1")
    assert lines[3].split("|")[1].split() == ["-"]
    assert lines[3].split("|")[2].split() == ["2/10", "4.50", "0.75"]
    assert attribution.own_table([("x", {"async": {"error": "not traced"}})]) == []


def test_the_groups_of_causes_add_up_per_mode():
    tail = [{"cause": "syscall: clone (fork)", "ms": 1, "share": 0.05},
            {"cause": "fault: sync", "ms": 1, "share": 0.10},
            {"cause": attribution.CHILD_COPYING, "ms": 1, "share": 0.05},
            {"cause": "fault: COW", "ms": 1, "share": 0.20},
            {"cause": "user space", "ms": 1, "share": 0.15},
            {"cause": "syscall: write", "ms": 1, "share": 0.10},
            {"cause": "mmap_lock wait", "ms": 1, "share": 0.05},
            {"cause": "runnable: the load generator", "ms": 1, "share": 0.20},
            {"cause": "client: load generator sleeping", "ms": 1, "share": 0.05},
            {"cause": "unexplained", "ms": 1, "share": 0.05}]
    lines = attribution.group_table([("2048M-set80-c1-t1", {"async": {"tail": tail},
                                                            "default": {"error": "not traced"}})])
    assert len(lines) == 3
    head = lines[1].split()
    assert head[:2] == ["configuration", "mode"] and "Async-fork" in head
    cells = lines[2].split()
    assert cells[:2] == ["2048M-set80-c1-t1", "async"]
    assert [float(c.rstrip("%")) for c in cells[2:]] == [5.0, 15.0, 20.0, 30.0, 20.0, 5.0, 5.0]
    assert attribution.group_table([("x", {"async": {"error": "not traced"}})]) == []


# --- catch-all labels: covered, not explained ------------------------------

CATCH_ALL_TAIL = [{"cause": "syscall: clone (fork)", "ms": 1, "share": 0.05},
                  {"cause": "fault: sync", "ms": 2, "share": 0.10},
                  {"cause": "fault: COW", "ms": 4, "share": 0.20},
                  {"cause": "user space", "ms": 3, "share": 0.15},
                  {"cause": "syscall: write", "ms": 2, "share": 0.10},
                  {"cause": "runnable: the load generator", "ms": 2, "share": 0.10},
                  {"cause": "runnable: other (kcompactd0)", "ms": 1, "share": 0.05},
                  {"cause": "runnable: unknown", "ms": 1, "share": 0.05},
                  {"cause": "client: load generator sleeping", "ms": 1, "share": 0.05},
                  {"cause": "client: load generator unknown", "ms": 1, "share": 0.05},
                  {"cause": "sleeping", "ms": 1, "share": 0.05},
                  {"cause": "unexplained", "ms": 1, "share": 0.05}]


def test_catch_all_labels_are_covered_not_explained():
    for c in ("user space", "runnable: unknown", "client: load generator unknown",
              "runnable: other (ksoftirqd)", "sleeping"):
        assert attribution.catch_all(c), c
    for c in ("fault: COW", "syscall: write", "runnable: the load generator",
              "client: load generator sleeping", "sleeping in read", "unexplained"):
        assert not attribution.catch_all(c), c
    e = attribution.explained(CATCH_ALL_TAIL)
    assert e["explained_specific"] == pytest.approx(0.60)
    assert e["catch_all"] == pytest.approx(0.35)
    assert e["unexplained"] == pytest.approx(0.05)
    assert (e["explained_specific_ms"], e["catch_all_ms"], e["unexplained_ms"]) == (12, 7, 1)
    assert e["catch_all_causes"] == {"user space": 0.15, "runnable: other (kcompactd0)": 0.05,
                                     "runnable: unknown": 0.05,
                                     "client: load generator unknown": 0.05, "sleeping": 0.05}
    line, = attribution.explained_lines("async", {"tail": CATCH_ALL_TAIL})
    assert "60.0% is explained by specific causes, 35.0% only covered by catch-all" in line


def test_the_group_table_puts_catch_alls_apart():
    lines = attribution.group_table([("2048M-set80-c1-t1", {"async": {"tail": CATCH_ALL_TAIL}})],
                                    catch_all_apart=True)
    assert len(lines) == 3
    assert "catch-all" in lines[0]
    head = lines[1].split()
    assert head[-3:] == ["catch-all", "unexplained", "explained"]
    cells = [float(c.rstrip("%")) for c in lines[2].split()[2:]]
    # fork(), Async-fork, COW, own work (write only), CPU (load generator
    # only), client (sleeping only), catch-all, unexplained, explained.
    assert cells == [5.0, 10.0, 20.0, 10.0, 10.0, 5.0, 35.0, 5.0, 60.0]
    assert sum(cells[:-1]) == pytest.approx(100)


def test_attribute_reports_the_tail_explained_and_catch_all_apart():
    tl = timeline([
        switch(9.999, 0, "swapper/0", "R", SERVER, "redis-server"),
        fault(10.000, 0x7), sync(10.009, 8 * MS), fault_ret(10.010),
    ])
    reqs = [(at(10.0) + i * 100_000, at(10.0105), "S") for i in range(5)] + \
        [(at(10.011) + i * 10_000, at(10.0111) + i * 10_000, "G") for i in range(200)]
    att = attribution.attribute(tl, reqs, (at(10.0), at(10.1)), 1 * MS)
    e = att["tail_explained"]
    # 16 ms of synchronization and 3.9 of COW fault are causes; the 1 ms
    # in user space only covered.
    assert e["explained_specific_ms"] == pytest.approx(19.9)
    assert e["catch_all_ms"] == pytest.approx(1.0)
    assert e["explained_specific"] == pytest.approx(19.9 / 20.9)
    assert e["catch_all_causes"] == {"user space": pytest.approx(1.0 / 20.9)}


def test_the_group_table_of_committed_records(tmp_path, capsys):
    rec = {"kind": "demo", "modes": {"async": {"attribution": {"tail": CATCH_ALL_TAIL}},
                                     "default": {"fork_ms": 1.0}}}
    f = tmp_path / "demo-redis-2026-01-01.json"
    f.write_text(json.dumps(rec))
    assert attribution.main([str(f)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2].split()[:2] == ["demo-redis-2026-01-01", "async"]
    assert out[2].split()[-1] == "60.0%"
    assert out[3].startswith("demo-redis-2026-01-01 async: of the tail's time, 60.0%")
    (tmp_path / "none.json").write_text(json.dumps({"kind": "demo", "modes": {}}))
    assert attribution.main([str(tmp_path / "none.json")]) == 1


# The rows of docs/findings/snapshot-tail.md's table of groups, and the
# records (and configurations) they come from.
TAIL_DOC_ROWS = {
    "1 GiB, 1 client": ("bench-redis-redis-2026-11-26.json", "1024M-set80-c1-t1"),
    "1 GiB, 32 clients": ("bench-redis-redis-2026-11-26.json", "1024M-set80-c32-t1"),
    "2 GiB, 1 client": ("bench-redis-redis-2026-11-26.json", "2048M-set80-c1-t1"),
    "2 GiB, 32 clients": ("bench-redis-redis-2026-11-26.json", "2048M-set80-c32-t1"),
    "4 GiB, 1 client": ("bench-redis-redis-2026-11-26-2.json", "4096M-set80-c1-t1"),
    "4 GiB, 32 clients": ("bench-redis-redis-2026-11-26-2.json", "4096M-set80-c32-t1"),
    "demo, 2 GiB, 8 clients": ("demo-redis-2026-11-26-5.json", "this run"),
    "2 GiB, 8 clients (bench-redis, e8b3d36)": ("bench-redis-redis-2026-11-26-3.json",
                                                "2048M-set80-c8-t1"),
}


def test_snapshot_tail_counts_only_specific_causes_as_explained():
    """The finding's table of groups is the records' own, catch-alls apart."""
    doc = (TOP / "docs/findings/snapshot-tail.md").read_text()
    lines = doc.splitlines()
    at_head = next(i for i, r in enumerate(lines)
                   if r.startswith("| configuration | mode | fork() | Async-fork |"))
    cols = [c.strip() for c in lines[at_head].strip("|").split("|")][2:]
    table = []
    for r in lines[at_head + 2:]:
        if not r.startswith("|"):
            break
        table.append(r)
    assert cols[-3:] == ["catch-all", "unexplained", "explained"], cols
    name, seen = None, set()
    for row in table:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        name = cells[0] or name
        mode = {"default": "default", "Async-fork": "async"}[cells[1]]
        rec, config = TAIL_DOC_ROWS[name]
        atts = dict(attribution.record_configs(
            json.loads((TOP / "docs/results" / rec).read_text())))[config]
        got = attribution.group_table([("x", {mode: atts[mode]})], catch_all_apart=True)
        assert cells[2:] == got[2].split()[2:], (name, mode)
        seen.add((name, mode))
    assert len(seen) == 2 * len(TAIL_DOC_ROWS)
    assert "cover 100% of the tail" not in doc
