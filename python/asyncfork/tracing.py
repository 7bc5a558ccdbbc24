# SPDX-License-Identifier: GPL-2.0
"""Tracing around a Redis or Valkey snapshot (asyncfork.snapshot), in a
tracefs instance of the run's own: Async-fork's tracepoints and the
syscalls of the server's main thread (asyncfork.demo's interruptions and
syscall summary), and with --attribute everything asyncfork.attribution
reads (scheduler events, syscalls, faults, mmap_lock waits).  The machine's
own tracing is left alone; what the run mounts, makes and appends goes
when it ends (native.Settings)."""

import os
import shutil
import time
from pathlib import Path

from asyncfork import attribution, native


class Unavailable(Exception):
    """--attribute on a kernel whose tracing lacks what it needs: the
    message says what, and nothing was run."""


# x86_64 syscall numbers the server's main thread is traced for, by name.
# Left out of the trace: read (every request) and the event-loop waits,
# which block by design.
SYSCALLS = {1: "write", 2: "open", 3: "close", 5: "fstat", 8: "lseek", 9: "mmap",
            10: "mprotect", 11: "munmap", 12: "brk", 20: "writev", 25: "mremap",
            28: "madvise", 56: "clone", 57: "fork", 58: "vfork", 61: "wait4",
            74: "fsync", 75: "fdatasync", 82: "rename", 257: "openat", 262: "newfstatat",
            332: "statx", 435: "clone3"}
UNTRACED = (0, 232, 281, 441)          # read, epoll_wait, epoll_pwait, epoll_pwait2
FORKS = ("clone", "fork", "vfork", "clone3")
# Syscalls that take the mmap_lock for writing: the production report's
# remaining stall was an mmap() of Redis's log call waiting for it.
MMAP_LOCK = ("mmap", "munmap", "mremap", "mprotect", "madvise", "brk")


class Trace:
    """Tracepoints around one snapshot: the Async-fork events (the parent's
    proactive synchronizations, each one an interruption of the server, and
    the child's copy, with their durations) and every syscall of the
    server's main thread but reads and event-loop waits, so that a stall in
    one (a log write, an mmap) shows with its duration.

    The events go to a tracefs instance of the run's own (DIR), made and
    removed by the run: its buffer, clock and events are its own, and the
    machine's tracing (its buffer, clock, enabled events) is left alone.

    attribute (--attribute): also what asyncfork.attribution needs to say
    where each slow request's time went (scheduler events, every syscall
    of the server, its faults with a kretprobe that the run adds to
    kprobe_events and removes, mmap_lock waits), in a buffer sized for
    it; stop() saves the text beside the results for the analysis."""

    TRACEFS = Path("/sys/kernel/tracing")
    DIR = TRACEFS / "instances/redis-demo"
    EVENTS = ("async_fork_start", "async_fork_sync", "async_fork_child_done",
              "async_fork_fallback")
    RAW = ("sys_enter", "sys_exit")

    def __init__(self, enabled: bool, settings: native.Settings | None = None,
                 attribute: bool = False, say=print):
        """settings: mounts tracefs and makes the instance, and undoes
        both when the run ends (without it, DIR must exist).  attribute:
        raises Unavailable at once if the kernel lacks what it needs.
        say: how the run prints a line (a warning of lost events)."""
        root = settings.root if settings else Path("/")
        self.dir = root / self.DIR.relative_to("/")
        self.tracefs = root / self.TRACEFS.relative_to("/")
        self.settings, self.attribute, self.save_dir, self.record = settings, attribute, None, {}
        self.say = say
        if enabled and settings and self.dir.is_relative_to(self.tracefs):
            if not (self.tracefs / "trace").exists():
                settings.mount("tracefs", self.tracefs)
            if attribute:
                self.check_attribution()
            if (self.tracefs / "events/async_fork").is_dir():
                settings.mkdir(self.dir)
        self.ok = enabled and (self.dir / "events/async_fork").is_dir()
        self.syscalls = self.ok and (self.dir / "events/raw_syscalls").is_dir()
        if self.ok:
            # Switched on once, here, before the server runs, and off only
            # when the instance goes: switching a tracepoint patches kernel
            # text, and with QEMU's multi-threaded TCG a vCPU can still run
            # the int3 of a patch that has ended (an "Oops: int3" in
            # ttwu_do_wakeup(), docs/findings/distro-kernel-test-deb.md).
            # start() and stop() only filter and turn recording on and off.
            self._write("tracing_on", "0")
            self._set(None)

    @classmethod
    def plan(cls, plan: native.Plan, attribute: bool) -> None:
        """What __init__ will change (with settings), before it does."""
        tracefs = plan.settings.path(cls.TRACEFS)
        mounted = (tracefs / "trace").exists()
        if not mounted:
            plan.other(f"tracefs mounted on {cls.TRACEFS} (unmounted at the end)")
        kprobe = tracefs / "events" / attribution.KPROBE_GROUP / attribution.KPROBE_NAME
        if attribute and not kprobe.is_dir():
            plan.other(f"kprobe '{attribution.KPROBE}' appended to "
                       f"{cls.TRACEFS}/kprobe_events (removed at the end)")
        if not mounted or (tracefs / "events/async_fork").is_dir():
            plan.other(f"tracing instance {cls.DIR} made (removed at the end)")

    def check_attribution(self) -> None:
        if not (self.tracefs / "events").is_dir():
            raise Unavailable(f"--attribute: no tracefs at {self.TRACEFS} (CONFIG_FTRACE, "
                              "and mount -t tracefs none /sys/kernel/tracing)")
        missing = attribution.missing_events(self.tracefs)
        if missing:
            raise Unavailable(f"--attribute: this kernel ({os.uname().release}) has no "
                              f"{', '.join(missing)}: nothing was run")
        kprobe = self.tracefs / "events" / attribution.KPROBE_GROUP / attribution.KPROBE_NAME
        if not kprobe.is_dir():
            # Appended (a write would remove every kprobe of the machine),
            # removed when the run ends, after the instance that uses it.
            self.settings.append(self.tracefs / "kprobe_events", attribution.KPROBE,
                                 attribution.KPROBE_REMOVE)

    def _write(self, name: str, value: str) -> None:
        # The instance's own files: it goes when the run ends.
        path = self.dir / name
        if self.settings:
            self.settings.write(path, value, save=False)
        else:
            path.write_text(value)

    def _set(self, pid: int | None, loadgen: int | None = None) -> None:
        """pid None: every event on, unfiltered (recording is off); else
        the filters for the server @pid and the load generator."""
        if pid is None:
            for e in self.EVENTS:
                self._write(f"events/async_fork/{e}/enable", "1")
        if self.attribute:
            # Every syscall of the server (and the other events) for the analysis.
            for e, f in attribution.filters(pid or 0, loadgen or 0).items():
                if pid is None:
                    self._write(f"events/{e}/enable", "1")
                elif f:
                    self._write(f"events/{e}/filter", f)
            return
        if not self.syscalls:
            return
        for e in self.RAW:
            d = f"events/raw_syscalls/{e}"
            if pid is None:
                # A filter that no event passes until start() sets the server's.
                self._write(f"{d}/filter", "common_pid == 0 && id == -1")
                self._write(f"{d}/enable", "1")
            else:
                self._write(f"{d}/filter", f"common_pid == {pid} && " +
                            " && ".join(f"id != {n}" for n in UNTRACED))

    def _buffer_kb(self) -> int:
        if not self.attribute:
            return 16384
        return attribution.buffer_kb(native.available_mb() << 10, os.cpu_count() or 1)

    def start(self, pid: int, loadgen: int | None = None) -> None:
        if not self.ok:
            return
        self._write("tracing_on", "0")
        self._write("trace_clock", "mono")
        self._write("buffer_size_kb", str(self._buffer_kb()))
        if self.attribute:
            # A full buffer drops the newest events, not the fork's.
            self._write("options/overwrite", "0")
        self._write("trace", "")
        self._set(pid, loadgen)
        self._write("tracing_on", "1")
        if self.attribute:
            # The clock check: a marker between two readings of CLOCK_MONOTONIC.
            t1 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            self._write("trace_marker", f"{attribution.CLOCK_MARK} {t1}")
            t2 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            self.record = {"server_pid": pid, "loadgen_pid": loadgen,
                           "harness_pid": os.getpid(),
                           "clock": {"t1": t1, "t2": t2},
                           "buffer_kb": int(self._buffer_kb())}

    def _save(self, name: str):
        """--attribute: the trace copied beside the results (streamed: it
        can be hundreds of MiB), with the buffer's per-CPU statistics."""
        path = self.save_dir / name
        with open(self.dir / "trace", "rb") as src, open(path, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        stats = attribution.cpu_stats(self.dir)
        self.record.update(trace=name, cpu_stats=stats, bytes=path.stat().st_size)
        lost = sum(s.get("overrun", 0) + s.get("dropped", 0) for s in stats.values())
        if lost:
            self.say(f"WARNING: the trace buffer lost {lost} events ({self.record['buffer_kb']} "
                "KiB a CPU): the attribution stops at the first loss")
        return open(path, errors="replace")

    def stop(self, pid: int, since_ns: int = 0, name: str | None = None) -> dict:
        """Events of the server (pid) and of its snapshot child, times in
        ns of CLOCK_REALTIME; syscalls only from since_ns on.  name: with
        --attribute, the file the trace is saved to (in save_dir)."""
        if not self.ok:
            return {}
        self._write("tracing_on", "0")
        offset = time.time_ns() - time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        if self.attribute and name and self.save_dir:
            lines = self._save(name)
        else:
            lines = (self.dir / "trace").read_text().splitlines()
        out = {"forks": [], "syncs": [], "child": [], "fallbacks": [],
               "lost": False, "syscalls": {} if self.syscalls else None}
        mms = set()
        entered = None      # (nr, t_ns) of the main thread's syscall in progress
        for line in lines:
            if line.startswith("#"):
                continue
            if "[LOST " in line:
                out["lost"] = True
            head, sep, rest = line.partition(": async_fork_")
            if not sep:
                head, sep, rest = line.partition(": sys_")
                if not sep or not rest.startswith(("enter: NR ", "exit: NR ")):
                    continue
            try:
                task_pid = int(head.split("[")[0].strip().rsplit("-", 1)[1])
                ts = offset + int(float(head.rsplit(None, 1)[1].rstrip(":")) * 1e9)
            except (IndexError, ValueError):
                continue
            if rest.startswith(("enter: NR ", "exit: NR ")):
                if task_pid != pid or out["syscalls"] is None:
                    continue
                nr = int(rest.split()[2])
                if nr in UNTRACED:      # traced for --attribute only
                    continue
                if rest.startswith("enter"):
                    entered = (nr, ts) if ts >= since_ns else None
                elif entered and entered[0] == nr:
                    name = SYSCALLS.get(nr, f"NR {nr}")
                    s = out["syscalls"].setdefault(name, {"count": 0, "max_ns": 0,
                                                          "max_at_ns": 0})
                    s["count"] += 1
                    if ts - entered[1] >= s["max_ns"]:
                        s["max_ns"], s["max_at_ns"] = ts - entered[1], entered[1]
                    entered = None
                continue
            event, _, fields = rest.partition(": ")
            f = dict(kv.split("=", 1) for kv in fields.split() if "=" in kv)
            if event == "start" and task_pid == pid:
                mms.add(f["mm"])
                out["forks"].append({"t_ns": ts, "links": int(f["links"]),
                                     "pmds": int(f["pmds"]), "child_mm": f["child_mm"]})
            elif event == "sync" and f.get("mm") in mms:
                out["syncs"].append({"t_ns": ts, "pmds": int(f["pmds"]),
                                     "vma_wide": f["vma_wide"] == "1",
                                     "duration_ns": int(f["duration_ns"])})
            elif event == "child_done" and any(f.get("child_mm") == x["child_mm"]
                                               for x in out["forks"]):
                out["child"].append({"t_ns": ts, "pmds": int(f["pmds"]),
                                     "threads": int(f["threads"]),
                                     "duration_ns": int(f["duration_ns"]),
                                     "err": int(f["err"])})
            elif event == "fallback" and task_pid == pid:
                out["fallbacks"].append(f.get("reason", "?"))
        if hasattr(lines, "close"):
            lines.close()
        if self.attribute and self.record:
            out["attribution"], self.record = self.record, {}
        return out
