# SPDX-License-Identifier: GPL-2.0
"""Attribution: where the latency of a slow request went, from the kernel's
own tracing (tracefs), for the demo's and the benchmark's --attribute.

While a snapshot runs, a tracefs instance of the run's own (class Trace of
asyncfork.tracing) records, besides Async-fork's tracepoints:

  * sched_switch on every CPU (who ran where) and sched_wakeup of the
    server's main thread and of the load generator: when each ran, waited
    for a CPU (and who had it instead) or slept;
  * every syscall of the server's main thread (raw_syscalls);
  * its page faults: exceptions:page_fault_user / page_fault_kernel at the
    start (their error_code says present and write: a COW fault) and a
    kretprobe on handle_mm_fault at the end (x86 has no fault-exit
    tracepoint).  A kretprobe rather than function_graph: it is an event
    like the others, so it goes into the same instance, with the same
    clock, filter (the server's pid) and buffer, and it leaves the
    instance's tracer (nop) alone; function_graph would be a second
    tracer with its own output format.  An async_fork_sync of the
    server inside a fault is "fault: sync" for its own duration (the
    tracepoint's, lock waits included); the rest of the fault is the
    fault's (COW or other);
  * mmap_lock:mmap_lock_start_locking / acquire_returned of the server
    (the time between them is a wait for the mmap_lock).

The instance's trace_clock is "mono", CLOCK_MONOTONIC, the clock of
loadgen's intended send times (its header's start_monotonic_ns): each run
writes a trace_marker between two readings of CLOCK_MONOTONIC and the
analysis checks that the marker's timestamp falls between them (in the
lean guest it did, to the microsecond the text shows).

The analysis (host side, or natively) turns the events into a timeline of
the server's main thread, a list of (start, end, cause), and splits the
interval [intended send, reply] of each request into causes; what no
event explains (before the first event, after events were lost) is the
"unexplained" remainder, so that the causes always add up to the latency.
Covered is not explained: some labels name no cause ("user space", "runnable:
other", ...: CATCH_ALL), and the tail's time is reported as explained by
specific causes, covered by those catch-alls, or unexplained (explained()).
While the server sleeps in its event loop (epoll_wait) the request had not
reached it or its reply had not been read: the client side, split by what
the load generator was doing.

asyncfork attribution RECORD... prints the group-of-causes table
of committed bench-redis and demo records, catch-alls apart.
"""

import bisect
import heapq
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from asyncfork import entry

TRACEFS = Path("/sys/kernel/tracing")
KPROBE_GROUP = "afattr"
KPROBE_NAME = "fault_ret"
KPROBE = f"r:{KPROBE_GROUP}/{KPROBE_NAME} handle_mm_fault ret=$retval:x32"
KPROBE_REMOVE = f"-:{KPROBE_GROUP}/{KPROBE_NAME}"
SERVER_ONLY = "common_pid == {server}"
# Events besides Async-fork's (which class Trace enables), with their filters.
EVENTS = {
    "sched/sched_switch": None,         # every CPU: who ran instead
    "sched/sched_wakeup": "pid == {server} || pid == {loadgen}",
    "raw_syscalls/sys_enter": SERVER_ONLY,
    "raw_syscalls/sys_exit": SERVER_ONLY,
    "exceptions/page_fault_user": SERVER_ONLY,
    "exceptions/page_fault_kernel": SERVER_ONLY,
    "mmap_lock/mmap_lock_start_locking": SERVER_ONLY,
    "mmap_lock/mmap_lock_acquire_returned": SERVER_ONLY,
    f"{KPROBE_GROUP}/{KPROBE_NAME}": SERVER_ONLY,
}
CLOCK_MARK = "afattr-clock"
SLOW_FACTOR = 2.0       # a slow request: over twice the max of the window before
TAIL = 0.01             # the tail of the snapshot window: its slowest 1%
PRINT_SLOW = 8          # per-request breakdowns printed per mode (all go to the JSON)

# x86_64 syscall numbers, by name (the rest show as "NR n").
SYSCALLS = {0: "read", 1: "write", 2: "open", 3: "close", 5: "fstat", 7: "poll",
            8: "lseek", 9: "mmap", 10: "mprotect", 11: "munmap", 12: "brk",
            13: "rt_sigaction", 14: "rt_sigprocmask", 20: "writev", 23: "select",
            25: "mremap", 28: "madvise", 35: "nanosleep", 39: "getpid", 44: "sendto",
            45: "recvfrom", 51: "getsockname", 52: "getpeername", 54: "setsockopt",
            55: "getsockopt", 56: "clone", 57: "fork", 58: "vfork", 61: "wait4",
            72: "fcntl", 74: "fsync", 75: "fdatasync", 82: "rename", 202: "futex",
            228: "clock_gettime", 230: "clock_nanosleep", 232: "epoll_wait",
            233: "epoll_ctl", 257: "openat", 262: "newfstatat", 270: "pselect6",
            271: "ppoll", 281: "epoll_pwait", 288: "accept4", 293: "pipe2", 302: "prlimit64",
            318: "getrandom", 332: "statx",
            435: "clone3", 441: "epoll_pwait2"}
FORKS = {56, 57, 58, 435}
# The fork mechanism's own work in a request's time: fork() itself, the
# parent's synchronizations, and waiting for a CPU behind the child while it
# copies page tables (before it runs the snapshot) or behind a copy helper.
# Waiting behind the child while it writes the snapshot is the snapshot's,
# whatever the fork did; so are COW faults.
CHILD_COPYING = "runnable: the snapshot child copying tables"
OWN_WORK = {"fault: sync", "sync outside a fault", CHILD_COPYING, "runnable: a copy helper"}
OWN_LIMIT_NS = 1_000_000    # issue 18: no request delayed over 1 ms by it


def own_work(cause: str) -> bool:
    return cause in OWN_WORK or cause.endswith("(fork)")


# Where the server sleeps waiting for work: asleep there, it had nothing
# to do (the request had not arrived, or it waits for its reply to be read).
EVENT_WAITS = {7, 23, 232, 270, 271, 281, 441}
VM_FAULT_RETRY = 0x400

LINE = re.compile(r"^\s*(?P<comm>.*?)-(?P<pid>\d+)\s+(?:\(\s*[\d-]+\)\s+)?\[(?P<cpu>\d+)\]"
                  r"\s+(?:\S+\s+)?(?P<ts>\d+\.\d+):\s+(?P<event>\w+):\s?(?P<rest>.*)$")
LOST = re.compile(r"CPU:(\d+) \[LOST (\d+) EVENTS\]")
SWITCH = re.compile(r"prev_comm=(.*) prev_pid=(-?\d+) prev_prio=-?\d+ prev_state=(\S+) "
                    r"==> next_comm=(.*) next_pid=(-?\d+) next_prio=")
WAKEUP = re.compile(r"comm=(.*) pid=(\d+) prio=-?\d+ target_cpu=(\d+)")


# --- recording -------------------------------------------------------------

def missing_events(tracefs: Path) -> list:
    """The events attribution needs that this kernel's tracefs lacks (the
    kprobe is made by the run: it needs kprobe_events)."""
    out = [e for e in EVENTS if not e.startswith(KPROBE_GROUP) and
           not (tracefs / "events" / e).is_dir()]
    if not (tracefs / "kprobe_events").exists():
        out.append("kprobe_events (CONFIG_KPROBE_EVENTS)")
    if not (tracefs / "events/async_fork").is_dir():
        out.append("async_fork/* (a kernel with Async-fork)")
    return out


def config_missing(config: Path) -> list:
    """The options a guest kernel's .config lacks for attribution."""
    need = ("CONFIG_FTRACE", "CONFIG_EVENT_TRACING", "CONFIG_FTRACE_SYSCALLS",
            "CONFIG_KPROBE_EVENTS", "CONFIG_KRETPROBES", "CONFIG_ASYNC_FORK")
    have = {line.split("=")[0] for line in config.read_text().splitlines()
            if line.endswith("=y")}
    return [o for o in need if o not in have]


def buffer_kb(available_kb: int, cpus: int) -> int:
    """The instance's buffer per CPU: a 32nd of the memory available, within
    8-64 MiB a CPU.  A 256 MiB guest run at 1000 requests/s made about 5000
    events a second (0.5 MiB of text; the buffer holds them in less), so
    64 MiB lasts minutes; what does not fit is dropped (overwrite off, so
    the fork, at the start, is kept) and reported."""
    return max(8192, min(65536, available_kb // 32 // max(1, cpus)))


def filters(server: int, loadgen: int) -> dict:
    """{event: filter text or None} for one run."""
    return {e: f.format(server=server, loadgen=loadgen) if f else None
            for e, f in EVENTS.items()}


def cpu_stats(instance: Path) -> dict:
    """{cpu: {"overrun": n, "dropped": n, "entries": n}} of the instance."""
    out = {}
    for d in sorted((instance / "per_cpu").glob("cpu*")):
        s = {}
        for line in (d / "stats").read_text().splitlines():
            k, _, v = line.partition(":")
            k = k.strip().replace(" ", "_")
            if k in ("entries", "overrun", "dropped_events"):
                s[k.replace("_events", "")] = int(v)
        out[int(d.name[3:])] = s
    return out


# --- parsing ---------------------------------------------------------------

def ts_ns(text: str) -> int:
    """A tracefs timestamp, "26.356885", in ns."""
    s, _, f = text.partition(".")
    return int(s) * 1_000_000_000 + int(f.ljust(9, "0")[:9])


@dataclass
class Event:
    ts: int
    cpu: int
    pid: int
    name: str
    rest: str


def parse(lines) -> tuple[list, dict]:
    """(events, lost): the events of tracefs text in order, and the events
    lost per CPU that the text itself reports ("CPU:1 [LOST 12 EVENTS]")."""
    events, lost = [], {}
    for line in lines:
        if line.startswith("#"):
            continue
        m = LINE.match(line)
        if m:
            events.append(Event(ts_ns(m["ts"]), int(m["cpu"]), int(m["pid"]), m["event"],
                                m["rest"]))
            continue
        m = LOST.search(line)
        if m:
            lost[int(m[1])] = lost.get(int(m[1]), 0) + int(m[2])
    return events, lost


def fields(rest: str) -> dict:
    return dict(kv.split("=", 1) for kv in rest.split() if "=" in kv)


def clock_offset(events: list, t1: int, t2: int) -> int | None:
    """How far the marker written between CLOCK_MONOTONIC readings t1 and
    t2 lies outside [t1, t2] in the trace, in ns (0: aligned, to the
    microsecond of the text); None: no marker."""
    for e in events:
        if e.name == "tracing_mark_write" and e.rest.startswith(CLOCK_MARK):
            if e.ts < t1 - 1000:
                return e.ts - t1
            if e.ts > t2 + 1000:
                return e.ts - t2
            return 0
    return None


# --- the timeline ----------------------------------------------------------

@dataclass
class Fault:
    error_code: int

    def cause(self) -> str:
        # Present (bit 0) and write (bit 1): a write to a write-protected page.
        return "fault: COW" if self.error_code & 3 == 3 else "fault: other"


@dataclass
class Wait:
    cpu: int            # where it waited: the CPU it ran on next (or its wake-up target)


class Thread:
    """The state of the server's main thread as the events go by, and the
    timeline they make: segments (start, end, cause or an object whose
    cause is known later: a Fault, a Wait, "idle")."""

    def __init__(self, pid: int):
        self.pid = pid
        self.sched = None       # "run", "wait", "sleep"; None: not known yet
        self.syscall = None
        self.syscall_since = None
        self.fault = None
        self.lock = False
        self.sync = 0
        self.wait = None
        self.since = None
        self.segments = []
        self.forks = []         # (start, end) of fork()'s syscalls
        self.children = set()   # pids fork() returned

    def what(self):
        if self.sched is None:
            return None
        if self.sched == "wait":
            return self.wait
        if self.lock:
            return "mmap_lock wait"
        # A synchronization is its own time only: the rest of the fault
        # around it (the copy-on-write of the faulting page, which the
        # default fork's write-protected PTE would have caused as well) is
        # the fault's.
        if self.sync:
            return "fault: sync" if self.fault else "sync outside a fault"
        if self.fault:
            return self.fault
        if self.sched == "sleep":
            if self.syscall in EVENT_WAITS:
                return "idle"
            return f"sleeping in {syscall_name(self.syscall)}" if self.syscall is not None \
                else "sleeping"
        if self.syscall is not None:
            return f"syscall: {syscall_name(self.syscall)}"
        return "user space"

    def cut(self, ts: int) -> None:
        """Ends the current segment at ts: the state changes next."""
        w = self.what()
        if w is not None and self.since is not None and ts > self.since:
            self.segments.append((self.since, ts, w))
        self.since = ts

    def unknown(self, ts: int) -> None:
        """Events were lost: nothing is known until the next switch."""
        self.cut(ts)
        self.sched, self.syscall, self.fault, self.lock, self.sync = None, None, None, False, 0

    def running(self) -> None:
        """An event in the thread's own context: it runs (whatever was
        believed: after lost events, say)."""
        self.sched, self.wait = "run", None


def syscall_name(nr: int) -> str:
    name = SYSCALLS.get(nr, f"NR {nr}")
    return f"{name} (fork)" if nr in FORKS else name


def sync_starts(events: list, pid: int) -> list:
    """The server's synchronizations are reported at their end, with their
    duration: their starts, as events of their own, in time order."""
    out = []
    for e in events:
        if e.name == "async_fork_sync" and e.pid == pid:
            d = int(fields(e.rest).get("duration_ns", 0))
            out.append(Event(e.ts - d, e.cpu, e.pid, "sync_start", ""))
    out.sort(key=lambda e: e.ts)
    return out


class Timeline:
    """The server's main thread, the CPUs and the load generator over the
    trace: built once, then asked about any interval."""

    def __init__(self, events: list, server: int, loadgen: int | None,
                 lost_after: int | None = None, harness: int | None = None):
        self.server, self.loadgen, self.harness = server, loadgen, harness
        self.thread = Thread(server)
        self.cpus = {}          # cpu: ([switch ts], [(pid, comm)])
        self.lg = []            # the load generator: (start, end, state)
        self.lg_state, self.lg_since = None, None
        self.syncs, self.child_copy, self.start_ns, self.end_ns = [], [], None, None
        self.lost_after = lost_after
        for e in heapq.merge(events, sync_starts(events, server), key=lambda e: e.ts):
            if lost_after is not None and e.ts > lost_after:
                break
            if self.start_ns is None:
                self.start_ns = e.ts
            self.end_ns = e.ts
            self.event(e)
        if self.end_ns is not None:
            self.thread.cut(self.end_ns)
            self.lg_cut(self.end_ns)
        self.segments = self.resolve()
        self.starts = [s[0] for s in self.segments]

    # -- reading the events --

    def event(self, e: Event) -> None:
        t = self.thread
        if e.name == "sched_switch":
            self.switch(e)
        elif e.name == "sched_wakeup":
            m = WAKEUP.match(e.rest)
            if not m:
                return
            pid, cpu = int(m[2]), int(m[3])
            if pid == t.pid and t.sched in ("sleep", None):
                t.cut(e.ts)
                t.sched, t.wait = "wait", Wait(cpu)
            elif pid == self.loadgen and self.lg_state in ("sleep", None):
                self.lg_set(e.ts, "wait")
        elif e.pid != t.pid:
            if e.name == "async_fork_child_done" and e.pid in t.children:
                d = int(fields(e.rest).get("duration_ns", 0))
                self.child_copy.append((e.ts - d, e.ts))
            return
        elif e.name == "sys_enter":
            t.cut(e.ts)
            t.running()
            t.syscall, t.syscall_since = int(e.rest.split()[1]), e.ts
        elif e.name == "sys_exit":
            t.cut(e.ts)
            t.running()
            parts = e.rest.split()
            nr = int(parts[1])
            if nr in FORKS:
                if t.syscall == nr:
                    t.forks.append((t.syscall_since, e.ts))
                if int(parts[3]) > 0:
                    t.children.add(int(parts[3]))
            t.syscall = None
        elif e.name in ("page_fault_user", "page_fault_kernel"):
            if t.fault is None:
                t.cut(e.ts)
                t.running()
                t.fault = Fault(int(fields(e.rest).get("error_code", "0"), 16))
        elif e.name == KPROBE_NAME:
            ret = int(fields(e.rest).get("ret", "0"), 16)
            # The fault's own call (not get_user_pages'), and not one
            # that retries (per-VMA lock, then again under the mmap_lock).
            if t.fault is not None and "do_user_addr_fault" in e.rest and \
                    not ret & VM_FAULT_RETRY:
                t.cut(e.ts)
                t.running()
                t.fault = None
        elif e.name == "mmap_lock_start_locking":
            t.cut(e.ts)
            t.running()
            t.lock = True
        elif e.name == "mmap_lock_acquire_returned":
            t.cut(e.ts)
            t.running()
            t.lock = False
        elif e.name == "sync_start":
            t.cut(e.ts)
            t.sync += 1
        elif e.name == "async_fork_sync":
            t.cut(e.ts)
            t.sync = max(0, t.sync - 1)
            d = int(fields(e.rest).get("duration_ns", 0))
            self.syncs.append((e.ts - d, e.ts))

    def switch(self, e: Event) -> None:
        m = SWITCH.match(e.rest)
        if not m:
            return
        prev, state, comm, nxt = int(m[2]), m[3], m[4], int(m[5])
        ts, times = self.cpus.setdefault(e.cpu, ([], []))
        ts.append(e.ts)
        times.append((nxt, comm))
        t = self.thread
        if prev == t.pid:
            t.cut(e.ts)
            if state.startswith("R"):
                t.sched, t.wait = "wait", Wait(e.cpu)
            else:
                t.sched = "sleep"
        if nxt == t.pid:
            t.cut(e.ts)
            if t.wait is not None:
                t.wait.cpu = e.cpu
            t.sched, t.wait = "run", None
        if prev == self.loadgen:
            self.lg_set(e.ts, "wait" if state.startswith("R") else "sleep")
        if nxt == self.loadgen:
            self.lg_set(e.ts, "run")

    def lg_cut(self, ts: int) -> None:
        if self.lg_state is not None and ts > self.lg_since:
            self.lg.append((self.lg_since, ts, self.lg_state))
        self.lg_since = ts

    def lg_set(self, ts: int, state: str) -> None:
        self.lg_cut(ts)
        self.lg_state = state

    # -- causes --

    def who(self, pid: int, comm: str) -> str:
        if pid == 0:
            return "CPU idle (wake-up latency)"
        if pid in self.thread.children:
            return "the snapshot child"
        if comm == "async_fork":
            return "a copy helper"
        if pid == self.loadgen:
            return "the load generator"
        if pid == self.harness:
            # The name asyncfork.snapshot had when the committed records
            # were made: one label for the harness in old and new records.
            return "the harness (redis_snapshot.py)"
        if comm.startswith("kworker"):
            return "a kworker"
        return f"other ({comm.split('/')[0]})"

    def on_cpu(self, cpu: int, a: int, b: int) -> list:
        """[(start, end, who)] of what ran on cpu within [a, b)."""
        ts, tasks = self.cpus.get(cpu, ([], []))
        i = bisect.bisect_right(ts, a) - 1
        out = []
        if i < 0:
            out.append((a, min(b, ts[0]) if ts else b, "unknown"))
            i = 0
        while i < len(ts) and ts[i] < b:
            end = ts[i + 1] if i + 1 < len(ts) else b
            lo, hi = max(a, ts[i]), min(b, end)
            if hi > lo:
                out.append((lo, hi, self.who(*tasks[i])))
            i += 1
        return out

    def client(self, a: int, b: int) -> list:
        """[(start, end, cause)] while the server was idle: the load generator's state."""
        names = {"run": "running", "wait": "runnable", "sleep": "sleeping"}
        out, pos = [], a
        i = bisect.bisect_right([s[0] for s in self.lg], a) - 1 if self.lg else -1
        for lo, hi, state in self.lg[max(0, i):]:
            if lo >= b:
                break
            lo, hi = max(lo, a), min(hi, b)
            if hi <= lo:
                continue
            if lo > pos:
                out.append((pos, lo, "client: load generator unknown"))
            out.append((lo, hi, f"client: load generator {names[state]}"))
            pos = hi
        if pos < b:
            out.append((pos, b, "client: load generator unknown"))
        return out

    def child_parts(self, a: int, b: int) -> list:
        """[a, b), a wait behind the snapshot child, split by whether the
        child was copying its page tables then (async_fork_child_done)."""
        out, pos = [], a
        for lo, hi in self.child_copy:
            lo, hi = max(lo, a), min(hi, b)
            if hi <= lo:
                continue
            if lo > pos:
                out.append((pos, lo, "runnable: the snapshot child"))
            out.append((lo, hi, CHILD_COPYING))
            pos = hi
        if pos < b:
            out.append((pos, b, "runnable: the snapshot child"))
        return out

    def resolve(self) -> list:
        """The thread's segments with every cause a string: a wait split by
        who ran on its CPU, idle time by the load generator's state."""
        out = []
        for a, b, w in self.thread.segments:
            if isinstance(w, Wait):
                for lo, hi, who in self.on_cpu(w.cpu, a, b):
                    if who == "the snapshot child":
                        out += self.child_parts(lo, hi)
                    else:
                        out.append((lo, hi, f"runnable: {who}"))
            elif isinstance(w, Fault):
                out.append((a, b, w.cause()))
            elif w == "idle":
                out += self.client(a, b)
            else:
                out.append((a, b, w))
        return out

    def breakdown(self, a: int, b: int) -> dict:
        """{cause: ns} of [a, b), "unexplained" the rest: they add up to b - a."""
        out, covered = {}, 0
        i = max(0, bisect.bisect_right(self.starts, a) - 1)
        while i < len(self.segments) and self.segments[i][0] < b:
            lo, hi, cause = self.segments[i]
            lo, hi = max(lo, a), min(hi, b)
            if hi > lo:
                out[cause] = out.get(cause, 0) + hi - lo
                covered += hi - lo
            i += 1
        out["unexplained"] = (b - a) - covered
        return out

    def bands(self, gap_ns: int = 1_000_000) -> dict:
        """Intervals to draw under the latency curve, neighbours closer than
        gap_ns merged: {band: [(start, end)]}."""
        raw = {"fork": self.thread.forks, "sync": self.syncs, "child copy": self.child_copy,
               "runnable": [], "fault": [], "mmap_lock wait": [], "child on CPU": []}
        for a, b, cause in self.segments:
            if cause.startswith("runnable"):
                raw["runnable"].append((a, b))
            elif cause.startswith("fault"):
                raw["fault"].append((a, b))
            elif cause == "mmap_lock wait":
                raw["mmap_lock wait"].append((a, b))
        for cpu in self.cpus:
            ts, tasks = self.cpus[cpu]
            for i, (pid, comm) in enumerate(tasks):
                if pid in self.thread.children or comm == "async_fork":
                    end = ts[i + 1] if i + 1 < len(ts) else self.end_ns
                    raw["child on CPU"].append((ts[i], end))
        return {k: merge(sorted(v), gap_ns) for k, v in raw.items()}


def merge(intervals: list, gap: int) -> list:
    out = []
    for a, b in intervals:
        if out and a - out[-1][1] <= gap:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


# --- requests --------------------------------------------------------------

def read_header(path: Path) -> dict:
    """The fields of a loadgen log's header line."""
    with open(path) as f:
        line = f.readline()
    return dict(x.split("=", 1) for x in line.split() if "=" in x)


def requests_mono(rows: list, header: dict) -> list:
    """[(intended, reply, op)] in CLOCK_MONOTONIC ns, from loadgen.read_latency's
    rows (intended in CLOCK_REALTIME ns, latency in us)."""
    shift = int(header["start_realtime_ns"]) - int(header["start_monotonic_ns"])
    return [(t - shift, t - shift + round(lat * 1000), op) for t, lat, op in rows]


def add(total: dict, part: dict) -> None:
    for k, v in part.items():
        total[k] = total.get(k, 0) + v


def table(total: dict) -> list:
    """[(cause, ms, share)] of summed breakdowns, largest first."""
    all_ns = sum(total.values()) or 1
    return [(k, v / 1e6, v / all_ns) for k, v in
            sorted(total.items(), key=lambda kv: -kv[1]) if v > 0]


def attribute(tl: Timeline, reqs: list, window: tuple, before_max_ns: int) -> dict:
    """The slow requests of the window (over SLOW_FACTOR times the max of the
    window before it) each with its breakdown, and where the window's tail
    (its slowest TAIL of requests) spent its time."""
    lo, hi = window
    inside = [r for r in reqs if lo <= r[0] < hi]
    slow = [r for r in inside if r[1] - r[0] > SLOW_FACTOR * before_max_ns]
    slow_rows = []
    for a, b, op in sorted(slow, key=lambda r: r[0] - r[1]):
        causes = tl.breakdown(a, b)
        slow_rows.append({"intended_ns": a, "latency_ms": (b - a) / 1e6, "op": op,
                          "causes_ms": {k: v / 1e6 for k, v in
                                        sorted(causes.items(), key=lambda kv: -kv[1])
                                        if v}})
    own = []
    for a, b, op in inside:
        parts = {k: v for k, v in tl.breakdown(a, b).items() if v and own_work(k)}
        own.append((sum(parts.values()), a, b, op, parts))
    worst = max(own, key=lambda o: o[0], default=None)
    without_fork = max((sum(v for k, v in o[4].items() if not k.endswith("(fork)"))
                        for o in own), default=0)
    by_lat = sorted(inside, key=lambda r: r[0] - r[1])
    tail = by_lat[:max(1, int(len(by_lat) * TAIL))] if by_lat else []
    total = {}
    for a, b, _ in tail:
        add(total, tl.breakdown(a, b))
    tail_rows = [{"cause": c, "ms": ms, "share": s} for c, ms, s in table(total)]
    return {"slow_threshold_ms": SLOW_FACTOR * before_max_ns / 1e6,
            "slow": slow_rows, "tail_requests": len(tail),
            "tail_min_ms": (tail[-1][1] - tail[-1][0]) / 1e6 if tail else None,
            "tail_ms": sum(b - a for a, b, _ in tail) / 1e6,
            "tail": tail_rows,
            # What the causes explain, and what catch-all labels only cover.
            "tail_explained": explained(tail_rows),
            "own": {"requests": len(inside),
                    "over_limit": sum(1 for o in own if o[0] > OWN_LIMIT_NS),
                    "limit_ms": OWN_LIMIT_NS / 1e6,
                    "max_ms": worst[0] / 1e6 if worst else 0.0,
                    "max_latency_ms": (worst[2] - worst[1]) / 1e6 if worst else None,
                    "max_causes_ms": {k: v / 1e6 for k, v in sorted(
                        worst[4].items(), key=lambda kv: -kv[1])} if worst else {},
                    "max_without_fork_ms": without_fork / 1e6}}


def lost_after(events: list, stats: dict, text_lost: dict) -> int | None:
    """The time after which the trace is incomplete: the last event of the
    first CPU that lost events (None: nothing lost)."""
    lossy = {c for c, s in stats.items() if s.get("overrun") or s.get("dropped")}
    lossy |= set(text_lost)
    if not lossy:
        return None
    last = {}
    for e in events:
        if e.cpu in lossy:
            last[e.cpu] = e.ts
    return min(last.values(), default=0)


def analyse_trace(path: Path, rec: dict, reqs: list, window: tuple,
                  before_max_ns: int) -> dict:
    """Everything --attribute reports for one mode: rec is what the run
    recorded (snapshot's result "attribution")."""
    with open(path) as f:
        events, text_lost = parse(f)
    stats = {int(c): s for c, s in rec.get("cpu_stats", {}).items()}
    cut = lost_after(events, stats, text_lost)
    tl = Timeline(events, rec["server_pid"], rec.get("loadgen_pid"), cut,
                  rec.get("harness_pid"))
    out = attribute(tl, reqs, window, before_max_ns)
    clock = rec.get("clock", {})
    out.update({
        "events": len(events),
        "lost_events": sum(s.get("overrun", 0) + s.get("dropped", 0) for s in stats.values())
        + sum(text_lost.values()),
        "complete_until_ns": cut,
        "clock_offset_ns": clock_offset(events, clock["t1"], clock["t2"]) if clock else None,
        "trace_start_ns": tl.start_ns, "trace_end_ns": tl.end_ns,
        "children": sorted(tl.thread.children),
        "bands": {k: [(a, b) for a, b in v] for k, v in tl.bands().items()},
    })
    return out


def slow_lines(mode: str, att: dict, cap: int = PRINT_SLOW) -> list:
    slow = att["slow"]
    lines = [f"{mode}: {len(slow)} requests slower than {att['slow_threshold_ms']:.1f} ms "
             f"(twice the max before BGSAVE){'; the slowest:' if slow else ''}"]
    for r in slow[:cap]:
        parts = ", ".join(f"{k} {v:.1f}" for k, v in r["causes_ms"].items())
        lines.append(f"  {r['latency_ms']:8.1f} ms {r['op']}: {parts}")
    if len(slow) > cap:
        lines.append(f"  ... {len(slow) - cap} more in the run's record")
    return lines


def own_lines(mode: str, att: dict) -> list:
    """The fork mechanism's own work in the snapshot window's requests."""
    o = att.get("own")
    if not o or not o["requests"]:
        return []
    parts = ", ".join(f"{k} {v:.2f}" for k, v in o["max_causes_ms"].items())
    return [f"{mode}: the fork's own work (fork(), synchronizations, the child's table copy, "
            f"copy helpers) delayed {o['over_limit']} of {o['requests']} requests by over "
            f"{o['limit_ms']:g} ms; at most {o['max_ms']:.2f} ms"
            + (f" ({parts})" if parts else "")
            + f"; without fork() itself at most {o['max_without_fork_ms']:.2f} ms"]


def own_table(configs: list) -> list:
    """Lines of one table over a benchmark's configurations [(name, {mode:
    attribution})]: per mode, the requests the fork's own work delayed by
    over the limit, its most for one request, and that without fork()."""
    rows = [(name, atts) for name, atts in configs
            if any(a.get("own", {}).get("requests") for a in atts.values())]
    if not rows:
        return []
    modes = [m for m in ("default", "async") if any(m in a for _, a in rows)]
    lines = [f"the fork's own work in each request (fork(), synchronizations, the child's "
             f"table copy): requests delayed over {OWN_LIMIT_NS / 1e6:g} ms, the most for one "
             f"request, the most without fork() itself",
             f"{'configuration':<24}" + "".join(f" | {m:^36}" for m in modes),
             f"{'':<24}" + "".join(f" | {'over':>13} {'max ms':>10} {'w/o fork':>11}"
                                   for _ in modes)]
    for name, atts in rows:
        cells = ""
        for m in modes:
            o = atts.get(m, {}).get("own")
            cells += (f" | {o['over_limit']:>6}/{o['requests']:<6} {o['max_ms']:>10.2f} "
                      f"{o['max_without_fork_ms']:>11.2f}" if o and o["requests"]
                      else f" | {'-':>36}")
        lines.append(f"{name:<24}{cells}")
    return lines


# The groups of causes docs/findings/snapshot-tail.md reports: what the
# fork itself, Async-fork and the snapshot each cost, and what the machine.
GROUPS = ("fork()", "Async-fork", "COW faults", "server's own work",
          "waiting for a CPU", "client side", "unexplained")

# Labels that name no cause: time some event covers, but nothing says what
# it was for.  "user space" is the server running outside any traced
# syscall or fault (its own work, or whatever the trace cannot see: an
# interrupt, the emulator); "sleeping" a sleep in no known syscall;
# "runnable: unknown" a wait on a CPU whose first switch the trace lacks;
# "runnable: other (comm)" a wait behind a task the analysis has no name
# for; "client: load generator unknown" the server idle while the load
# generator's state is not known.  Time under them is covered, not
# explained: it is reported apart from the specific causes (catch_all()).
CATCH_ALL = ("user space", "sleeping", "runnable: unknown", "client: load generator unknown")
CATCH_ALL_PREFIXES = ("runnable: other",)


def catch_all(cause: str) -> bool:
    return cause in CATCH_ALL or cause.startswith(CATCH_ALL_PREFIXES)


def explained(tail: list) -> dict:
    """How much of a tail ([{"cause", "ms", "share"}], attribute()'s) its
    causes explain: "explained_specific" (causes that say what the time
    was for), "catch_all" (catch_all(): covered by an event, but no cause
    named), "unexplained" (no event at all), each a share of the tail's
    time and in ms, and the catch-all labels' own shares."""
    out = {"explained_specific": 0.0, "catch_all": 0.0, "unexplained": 0.0,
           "explained_specific_ms": 0.0, "catch_all_ms": 0.0, "unexplained_ms": 0.0,
           "catch_all_causes": {}}
    for r in tail:
        kind = ("unexplained" if r["cause"] == "unexplained" else
                "catch_all" if catch_all(r["cause"]) else "explained_specific")
        out[kind] += r["share"]
        out[kind + "_ms"] += r["ms"]
        if kind == "catch_all":
            out["catch_all_causes"][r["cause"]] = r["share"]
    return out


def group(cause: str) -> str:
    if cause.endswith("(fork)"):
        return "fork()"
    if cause in OWN_WORK:
        return "Async-fork"
    if cause == "fault: COW":
        return "COW faults"
    if cause.startswith("runnable:"):
        return "waiting for a CPU"
    if cause.startswith("client:"):
        return "client side"
    if cause == "unexplained":
        return cause
    # User space, syscalls, other faults, mmap_lock waits: the server's
    # own work, mostly on the requests queued ahead of this one.
    return "server's own work"


CATCH_ALL_GROUP = "catch-all"
EXPLAINED = "explained"


def group_table(configs: list, catch_all_apart: bool = False) -> list:
    """Lines of one table over configurations [(name, {mode: attribution})]:
    the share of each group of causes in the tail's time, per mode.  With
    catch_all_apart (what the runs print), each group counts its specific
    causes only, the catch-all labels (catch_all()) have a column of their
    own before "unexplained", and a last column, "explained", sums the
    specific causes: what the trace explains, not merely covers."""
    rows = [(name, m, att) for name, atts in configs for m, att in atts.items()
            if att.get("tail")]
    if not rows:
        return []
    groups = (GROUPS[:-1] + (CATCH_ALL_GROUP, GROUPS[-1], EXPLAINED) if catch_all_apart
              else GROUPS)
    title = "the slowest 1% of the snapshot window, by group of causes (share of its time)"
    if catch_all_apart:
        title += ("; catch-all: time covered by labels that name no cause (user space, "
                  "runnable: other or unknown, ...); explained: the specific causes' sum")
    lines = [title, f"{'configuration':<24} {'mode':<8}" + "".join(f" {g:>7}" for g in groups)]
    for name, m, att in rows:
        share = dict.fromkeys(groups, 0.0)
        for r in att["tail"]:
            if catch_all_apart and catch_all(r["cause"]):
                share[CATCH_ALL_GROUP] += r["share"]
            else:
                share[group(r["cause"])] += r["share"]
        if catch_all_apart:
            share[EXPLAINED] = explained(att["tail"])["explained_specific"]
        lines.append(f"{name:<24} {m:<8}" + "".join(f" {share[g]:>{max(len(g), 7)}.1%}"
                                                      for g in groups))
    return lines


def explained_lines(mode: str, att: dict) -> list:
    """How much of the tail's time the causes explain (explained())."""
    if not att.get("tail"):
        return []
    e = explained(att["tail"])
    parts = ", ".join(f"{c} {s:.1%}" for c, s in e["catch_all_causes"].items())
    return [f"{mode}: of the tail's time, {e['explained_specific']:.1%} is explained by "
            f"specific causes, {e['catch_all']:.1%} only covered by catch-all labels"
            + (f" ({parts})" if parts else "") + f", {e['unexplained']:.1%} unexplained"]


def warning_lines(mode: str, att: dict) -> list:
    out = []
    if att["lost_events"]:
        out.append(f"{mode}: WARNING: the trace lost {att['lost_events']} events: attributed "
                   "only up to the first loss; later time counts as unexplained")
    off = att.get("clock_offset_ns")
    if off is None:
        out.append(f"{mode}: WARNING: no clock marker in the trace: alignment not checked")
    elif off:
        out.append(f"{mode}: WARNING: the trace clock is {off / 1e6:.3f} ms off "
                   "CLOCK_MONOTONIC: attribution may be shifted")
    return out


# --- one mode of a run -----------------------------------------------------

def analyse_mode(out: Path, m: dict, rows: list, header: dict, before_max_ms: float) -> dict:
    """--attribute's analysis of one mode of snapshot's result (m), its
    loadgen rows (loadgen.read_latency) and header: the window is the
    snapshot's, from BGSAVE until the RDB was written."""
    rec = m.get("trace", {}).get("attribution")
    if not rec:
        return {"error": "not traced"}
    if "start_monotonic_ns" not in header:
        return {"error": "the loadgen log has no start_monotonic_ns: rebuild build/bench"}
    path = out / rec.get("trace", "")
    if not rec.get("trace") or not path.exists():
        return {"error": f"no trace file {path}"}
    shift = int(header["start_realtime_ns"]) - int(header["start_monotonic_ns"])
    window = (m["bgsave_sent_ns"] - shift, m["bgsave_done_ns"] - shift)
    att = analyse_trace(path, rec, requests_mono(rows, header), window,
                        int(before_max_ms * 1e6))
    # Bands in seconds since BGSAVE, as the plot's x axis.
    att["bands"] = {k: [((a - window[0]) / 1e9, (b - a) / 1e9) for a, b in v]
                    for k, v in att["bands"].items()}
    for r in att["slow"]:
        r["since_bgsave_s"] = (r.pop("intended_ns") - window[0]) / 1e9
    return att


def mode_table(atts: dict) -> list:
    """Lines of one table: the tail time of each mode (columns) by cause (rows)."""
    modes = [m for m, a in atts.items() if "tail" in a]
    if not modes:
        return []
    causes, seen = [], set()
    for m in modes:
        for row in atts[m]["tail"]:
            if row["cause"] not in seen:
                seen.add(row["cause"])
                causes.append(row["cause"])
    by = {m: {r["cause"]: r for r in atts[m]["tail"]} for m in modes}
    head = f"{'where the tail time went':<44}" + "".join(f" {m:>18}" for m in modes)
    lines = [head, f"{'(slowest 1% of the snapshot window)':<44}" +
             "".join(f" {'ms':>10} {'share':>7}" for _ in modes)]
    for c in causes:
        cells = "".join(f" {by[m][c]['ms']:>10.1f} {by[m][c]['share']:>7.1%}" if c in by[m]
                        else f" {'':>10} {'':>7}" for m in modes)
        lines.append(f"{c:<44}{cells}")
    lines.append(f"{'requests (from ms)':<44}" + "".join(
        f" {atts[m]['tail_requests']:>10} {atts[m]['tail_min_ms'] or 0:>7.1f}" for m in modes))
    return lines


def print_report(atts: dict) -> None:
    """What --attribute prints after the demo's table."""
    for mode, att in atts.items():
        print()
        if "error" in att:
            print(f"{mode}: no attribution: {att['error']}")
            continue
        for line in (warning_lines(mode, att) + own_lines(mode, att) +
                     explained_lines(mode, att) + slow_lines(mode, att)):
            print(line)
    lines = mode_table(atts)
    if lines:
        print()
        print("\n".join(lines))


# --- committed records -----------------------------------------------------

def record_configs(record: dict, name: str = "this run") -> list:
    """[(configuration, {mode: attribution})] of a bench-redis or demo
    record (the demo's one configuration is called name)."""
    if "runs" in record:
        return [(r["config"]["name"], {m: t["attribution"] for m, t in r["table"].items()
                                       if "attribution" in t}) for r in record["runs"]]
    return [(name, {m: t["attribution"] for m, t in record.get("modes", {}).items()
                    if "attribution" in t})]


def main(argv=None) -> int:
    """The group-of-causes table, catch-alls apart, of committed records:
    asyncfork attribution docs/results/bench-redis-*.json ..."""
    import json
    ap = entry.parser(main.__doc__.split("\n")[0])
    ap.add_argument("records", nargs="+", help="bench-redis or demo records (JSON)")
    a = ap.parse_args(argv)
    configs = []
    for f in a.records:
        configs += record_configs(json.loads(Path(f).read_text()), Path(f).stem)
    lines = group_table(configs, catch_all_apart=True)
    if not lines:
        print("attribution: no record given has an attributed tail", file=sys.stderr)
        return 1
    print("\n".join(lines))
    for name, atts in configs:
        for mode, att in atts.items():
            for line in explained_lines(f"{name} {mode}", att):
                print(line)
    return 0


if __name__ == "__main__":
    sys.exit(entry.run(main, "attribution"))
