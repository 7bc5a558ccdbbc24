# SPDX-License-Identifier: GPL-2.0
"""Redis snapshots are exact: DEBUG DIGEST at the instant of the fork equals
the digest of what the child wrote.

Debian's redis-server runs under a heavy write load that comes from one
pipelined connection; each snapshot command (BGSAVE or BGREWRITEAOF) is
sent in the middle of a pipeline, right after DEBUG DIGEST.  Redis runs one
connection's commands in order, so that digest is the dataset at the
instant of the fork.  Writes go on while the child saves; then the file is
loaded into a second server, whose DEBUG DIGEST must be the same.
Configurations: 4 KiB pages, THP (transparent_hugepage=always and
disable-thp no), io-threads with reading clients, BGREWRITEAOF (its base
file, RDB preamble).  Each checks that its forks were asynchronous
(/proc/vmstat async_fork) when --expect-async is given.  Output: KTAP.

Runs as root inside the test guest (tests/conftest.py puts it in the suite).
"""

import argparse
import random
import shutil
import sys
import threading
import time
from pathlib import Path

import redis

# The server's lifecycle is the harness's (the command that starts this
# program puts python/ on PYTHONPATH).
from asyncfork.redis_server import Server, ServerFailed

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")
# A reply that takes longer means the server hangs: fail with its state
# rather than wait for the suite's timeout.
REPLY_TIMEOUT_S = 120
SNAPSHOT_TIMEOUT_S = 240


def vmstat(name: str) -> int:
    for line in Path("/proc/vmstat").read_text().splitlines():
        key, _, val = line.partition(" ")
        if key == name:
            return int(val)
    return -1


def diag(msg: str) -> None:
    print(f"# {msg}", flush=True)


def start(port: int, workdir: Path, *args: str) -> Server:
    """Debian's redis-server on port, its files in workdir; a reply that
    takes longer than REPLY_TIMEOUT_S fails."""
    return Server(port, workdir, *args, timeout=300, socket_timeout=REPLY_TIMEOUT_S)


def digest_of_rdb(rdb: Path, port: int, workdir: Path) -> str:
    """DEBUG DIGEST of a second server that loaded @rdb."""
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    shutil.copy(rdb, workdir / "snap.rdb")
    s = start(port, workdir, "--dbfilename", "snap.rdb", "--appendonly", "no")
    try:
        return s.conn.execute_command("DEBUG", "DIGEST").decode()
    finally:
        s.stop()


def writes(p, rng: random.Random, keys: int, n: int) -> None:
    """@n writes of several types on @p: strings, hashes, lists, counters."""
    for _ in range(n):
        k = rng.randrange(keys)
        op = rng.random()
        if op < 0.6:
            p.set(f"key:{k}", rng.randbytes(rng.choice((16, 100, 1000))))
        elif op < 0.75:
            p.hset(f"hash:{k % 1000}", str(k), rng.randrange(1 << 30))
        elif op < 0.85:
            p.incrby(f"ctr:{k % 100}", rng.randrange(1000))
        elif op < 0.95:
            p.rpush(f"list:{k % 500}", rng.randbytes(32))
        else:
            p.delete(f"key:{k}")


def readers(port: int, keys: int, stop: threading.Event) -> None:
    r = redis.Redis(port=port, socket_timeout=REPLY_TIMEOUT_S)
    rng = random.Random(port)
    while not stop.is_set():
        p = r.pipeline(transaction=False)
        for _ in range(100):
            p.get(f"key:{rng.randrange(keys)}")
        p.execute()


def redis_tasks() -> str:
    """State, wait channel and kernel stack of every redis-server thread
    (the server's and the snapshot child's)."""
    out = []
    for proc in sorted(Path("/proc").glob("[0-9]*")):
        try:
            if not (proc / "comm").read_text().startswith("redis-"):
                continue
            for task in sorted(proc.glob("task/[0-9]*")):
                state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
                out.append(f"== {task} {(task / 'comm').read_text().strip()} {state} "
                           f"{(task / 'wchan').read_text()}\n{(task / 'stack').read_text()}")
        except OSError:
            continue
    return "\n".join(out) or "no redis-server thread"


def in_progress(conn, what: str) -> bool:
    info = conn.info("persistence")
    if what == "BGSAVE":
        return bool(info["rdb_bgsave_in_progress"])
    return bool(info["aof_rewrite_in_progress"] or info["aof_rewrite_scheduled"])


def snapshot_file(s: Server, what: str) -> Path:
    """The file the last snapshot wrote: dump.rdb, or the AOF's base file."""
    if what == "BGSAVE":
        if s.conn.info("persistence")["rdb_last_bgsave_status"] != "ok":
            raise RuntimeError(f"BGSAVE failed:\n{s.log_tail()}")
        return s.dir / "dump.rdb"
    if s.conn.info("persistence")["aof_last_bgrewrite_status"] != "ok":
        raise RuntimeError(f"BGREWRITEAOF failed:\n{s.log_tail()}")
    manifest = (s.dir / "aof" / "appendonly.aof.manifest").read_text()
    for line in manifest.splitlines():
        f = line.split()
        if "type" in f and f[f.index("type") + 1] == "b":
            return s.dir / "aof" / f[f.index("file") + 1]
    raise RuntimeError(f"no base file in the AOF manifest:\n{manifest}")


def run_config(name: str, a, port: int, server_args: list[str], what: str,
               reading_clients: int) -> tuple[bool, str]:
    rng = random.Random(f"{a.seed}:{name}")
    work = a.work / name
    if work.exists():
        shutil.rmtree(work)
    s = start(port, work, *server_args)
    stop = threading.Event()
    threads = [threading.Thread(target=readers, args=(port, a.keys, stop), daemon=True)
               for _ in range(reading_clients)]
    forks0, syncs0 = vmstat("async_fork"), vmstat("async_fork_pmd_sync")
    try:
        s.conn.execute_command("DEBUG", "POPULATE", a.keys, "key", 100)
        for t in threads:
            t.start()
        conn = redis.Redis(port=port, socket_timeout=REPLY_TIMEOUT_S)
        for i in range(a.snapshots):
            p = conn.pipeline(transaction=False)
            writes(p, rng, a.keys, a.batch)
            p.execute_command("DEBUG", "DIGEST")
            p.execute_command(what)
            writes(p, rng, a.keys, a.batch)
            replies = p.execute(raise_on_error=False)
            digest = replies[a.batch]
            if isinstance(digest, Exception) or isinstance(replies[a.batch + 1], Exception):
                return False, f"snapshot {i}: {digest!r} {replies[a.batch + 1]!r}"
            # The load goes on while the child writes the file.
            deadline = time.monotonic() + SNAPSHOT_TIMEOUT_S
            while in_progress(conn, what):
                if time.monotonic() > deadline:
                    return False, (f"snapshot {i}: {what} still running after "
                                   f"{SNAPSHOT_TIMEOUT_S} s\n{redis_tasks()}")
                p = conn.pipeline(transaction=False)
                writes(p, rng, a.keys, a.batch)
                p.execute()
            got = digest_of_rdb(snapshot_file(s, what), port + 1, a.work / "check")
            want = digest.decode()
            if got != want:
                return False, f"snapshot {i}: digest {got}, at the fork {want}"
            diag(f"{name}: snapshot {i}: {want} ({conn.dbsize()} keys now)")
        forks = vmstat("async_fork") - forks0
        syncs = vmstat("async_fork_pmd_sync") - syncs0
        diag(f"{name}: {forks} async forks, {syncs} page tables synchronized by the server")
        if a.expect_async and forks < a.snapshots:
            return False, f"only {forks} of {a.snapshots} forks were asynchronous"
        return True, f"{a.snapshots} snapshots exact"
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
        s.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--snapshots", type=int, default=4)
    ap.add_argument("--keys", type=int, default=200000)
    ap.add_argument("--batch", type=int, default=2000, help="writes per pipeline")
    ap.add_argument("--seed", type=int, default=random.randrange(1 << 32))
    ap.add_argument("--port", type=int, default=7400)
    ap.add_argument("--work", type=Path, default=Path("/tmp/redis-digest"))
    ap.add_argument("--expect-async", action="store_true")
    a = ap.parse_args()
    if a.snapshots < 1 or a.keys < 1 or a.batch < 1:
        ap.error("--snapshots, --keys and --batch must be positive")

    configs = [
        ("bgsave_4k", ["--disable-thp", "yes"], "BGSAVE", 0, None),
        ("bgsave_thp", ["--disable-thp", "no"], "BGSAVE", 0, "always"),
        ("bgsave_io_threads", ["--io-threads", "2", "--io-threads-do-reads", "yes"],
         "BGSAVE", 4, None),
        ("bgrewriteaof", ["--appendonly", "yes", "--appenddirname", "aof", "--aof-use-rdb-preamble", "yes",
                          "--auto-aof-rewrite-percentage", "0"], "BGREWRITEAOF", 0, None),
    ]
    print("TAP version 13")
    print(f"1..{len(configs)}")
    diag(f"seed {a.seed}, {a.keys} keys, {a.snapshots} snapshots per configuration")
    thp_saved = THP.read_text().split("[")[1].split("]")[0] if THP.exists() else None
    failed = 0
    for n, (name, args, what, nreaders, thp) in enumerate(configs, 1):
        if thp and thp_saved:
            THP.write_text(thp)
        try:
            ok, msg = run_config(name, a, a.port, args, what, nreaders)
        except (RuntimeError, ServerFailed, redis.RedisError, OSError) as e:
            ok, msg = False, f"{type(e).__name__}: {e}"
        finally:
            if thp and thp_saved:
                THP.write_text(thp_saved)
        failed += not ok
        print(f"{'ok' if ok else 'not ok'} {n} {name}: {msg}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
