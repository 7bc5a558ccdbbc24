# SPDX-License-Identifier: GPL-2.0
"""The Redis demo's snapshot check: it passes on an RDB written by a correct
fork under load, and fails on an RDB that lost a write or changed a key the
load never touched.  Runs on the host (its kernel's default fork) with
Debian's redis-server and loadgen; a check that cannot fail proves nothing."""

import json
import shutil
from argparse import Namespace
from pathlib import Path

import pytest
import redis

from conftest import BUILD, need

from asyncfork import snapshot


def small_run(tmp, last_arg: str) -> tuple[int, Path, Path]:
    """A 16 MiB run with the default fork only; @last_arg: --keep-rdb or
    --check-later.  Returns its exit code, out and work folders."""
    need(BUILD / "bench/loadgen", "no build/bench/loadgen: run make bench-programs")
    out, work = tmp / "out", tmp / "work"
    out.mkdir()
    rc = snapshot.run(["--out", str(out), "--work", str(work),
                       "--port", str(snapshot.free_port_pair()), "--no-cgroup",
                       "--modes", "default", "--dataset-mb", "16", "--rate", "400",
                       "--clients", "4", "--baseline", "2", last_arg])
    return rc, out, work


@pytest.fixture(scope="module")
def kept_run(tmp_path_factory):
    if not shutil.which("redis-server"):
        pytest.fail("no redis-server: run scripts/setup.sh")
    need(BUILD / "bench/loadgen", "no build/bench/loadgen: run make bench-programs")
    rc, out, work = small_run(tmp_path_factory.mktemp("redis"), "--keep-rdb")
    result = json.loads((out / "result.json").read_text())
    return rc, result, work


def recheck(result, work, tamper, start_state=None) -> dict:
    """verify() again on a copy of the RDB that `tamper(server)` changed,
    as if an earlier mode had left start_state ({key: value})."""
    a = Namespace(**result["args"])
    res = result["modes"]["default"]
    rdb = work / "dump-default.rdb"
    good = work / "dump-default.good"
    shutil.copy(rdb, good)
    run = snapshot.Run(work=work, port=snapshot.free_port_pair())
    try:
        p = run.start_server(run.verify_port, rdb.name, False, "tamper.log")
        r = redis.Redis(port=run.verify_port)
        tamper(r)
        r.save()
        p.stop()
        digest = run.loaded_digest(result["keys"], a.value_size)
        return run.verify("default", res, start_state or {}, result["keys"], a, digest)
    finally:
        shutil.move(good, rdb)
        run.kill_children()


def test_exact_snapshot_passes(kept_run):
    rc, result, _ = kept_run
    rdb = result["modes"]["default"]["rdb"]
    assert rc == 0 and rdb["exact"], rdb
    # The fork fell inside the load: writes on both sides of it.
    assert 0 < rdb["writes_before_fork"] < rdb["sets"], rdb


def test_lost_write_is_caught(kept_run):
    _, result, work = kept_run
    sets = snapshot.read_sets(work / "sets-default.txt")
    first = min(sets, key=lambda s: s[1])      # the first write of a connection

    def tamper(r):
        # Back to the dataset's value: as if that write had been lost.
        r.set(f"key:{first[2]}", snapshot.preload_value(first[2],
                                                        result["args"]["value_size"]))
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


def test_earlier_mode_write_is_checked(kept_run):
    # A key an earlier mode wrote must hold that write; here the RDB holds
    # the loaded value instead, and the digest (taken after every written
    # key is set back to its loaded value) cannot see it.
    _, result, work = kept_run
    touched = {s[2] for s in snapshot.read_sets(work / "sets-default.txt")}
    k = next(k for k in range(result["keys"]) if k not in touched)
    earlier = {k: snapshot.load_value("a", 0, 0, result["args"]["value_size"])}
    rdb = recheck(result, work, lambda r: None, earlier)
    assert not rdb["exact"] and rdb["mismatches"] == 1 and rdb["digest_ok"], rdb


def test_check_later_on_the_host(tmp_path):
    # What the demo does: the run leaves its RDB and writes in --out, the
    # host checks them afterwards.
    rc, out, _ = small_run(tmp_path, "--check-later")
    assert rc == 0 and (out / "dump-default.rdb").exists()
    assert "rdb" not in json.loads((out / "result.json").read_text())["modes"]["default"]
    assert snapshot.check_on_host(out)
    rdb = json.loads((out / "result.json").read_text())["modes"]["default"]["rdb"]
    assert rdb["exact"] and 0 < rdb["writes_before_fork"] < rdb["sets"], rdb
    assert not (out / "dump-default.rdb").exists()
