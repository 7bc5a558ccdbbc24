# SPDX-License-Identifier: GPL-2.0
"""Bad input to the demo and the benchmarks: a clear message and a non-zero
exit, at once, before any guest boots (each case must fail before the
kernel is even looked at, so a hang or a boot is itself a failure)."""

import socket
import subprocess
import sys

import pytest

from conftest import BUILD, TOP, asyncfork_command, need

PY = sys.executable
QUICK = 60      # seconds: none of these may get as far as booting a guest


def run(args, timeout=QUICK):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                          cwd=TOP)


@pytest.mark.parametrize("verb,args,message", [
    ("demo", ["--dataset-mb", "4096", "--memory", "2G"], "does not fit"),
    ("demo", ["--rate", "0"], "--rate"),
    ("demo", ["--no-such-option"], "unrecognized arguments"),
    ("demo", ["--memory", "lots"], "lots"),
    ("bench-redis", ["--sizes", "256,big"], "--sizes"),
    ("bench-redis", ["--sizes", "8192", "--memory", "4G"], "does not fit"),
    ("bench-redis", ["--threads", "64"], "copy threads"),
    ("bench-fork", ["--sizes", "8192", "--memory", "4G"], "do not fit"),
    ("bench-fork", ["--threads", "0"], "--threads"),
    ("bench-fork", ["--repeat", "x"], "invalid int"),
])
def test_bad_argument_is_refused(verb, args, message):
    r = run(asyncfork_command(verb) + ["--kernel", "/nonexistent"] + args)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert message in r.stderr, r.stderr
    assert "booting" not in r.stdout


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_loadgen_unreachable_server_fails_fast():
    loadgen = BUILD / "bench/loadgen"
    need(loadgen, "no build/bench/loadgen: run make bench-programs")
    r = run([str(loadgen), "--port", str(closed_port()), "--rate", "100",
             "--duration", "1"], timeout=30)
    assert r.returncode != 0
    assert "connect" in r.stderr.lower(), r.stderr


def test_loadgen_bad_arguments():
    loadgen = BUILD / "bench/loadgen"
    need(loadgen, "no build/bench/loadgen: run make bench-programs")
    for args, message in ((["--rate", "100"], "--duration"),
                          (["--rate", "100", "--duration", "1", "--dist", "zipf"], "--dist"),
                          (["--bogus"], "usage")):
        r = run([str(loadgen)] + args, timeout=10)
        assert r.returncode == 2, (args, r.stderr)
        assert message in r.stderr, (args, r.stderr)


def test_bench_redis_grid_is_every_size_with_every_client_count():
    from argparse import Namespace

    from asyncfork import bench_redis
    one_at_a_time = bench_redis.configurations(Namespace(
        sizes=[1024, 2048], set_ratios=[], clients=[1, 32], threads=[]))
    assert [c["name"] for c in one_at_a_time] == [
        "1024M-set80-c8-t1", "2048M-set80-c8-t1", "1024M-set80-c1-t1", "1024M-set80-c32-t1"]
    grid = bench_redis.configurations(Namespace(
        sizes=[1024, 2048, 4096], set_ratios=[0.2], clients=[1, 32], threads=[4], grid=True))
    assert [(c["dataset_mb"], c["clients"]) for c in grid] == [
        (1024, 1), (1024, 32), (2048, 1), (2048, 32), (4096, 1), (4096, 32)]
    assert all(c["modes"] == "default,async" and c["threads"] == 1 and c["set_ratio"] == 0.8
               for c in grid)


def test_bench_redis_record_leaves_the_bands_out():
    # The timeline bands are for the demo's plot; a bench-redis record keeps
    # everything else of each mode's attribution.
    from asyncfork import bench_redis
    att = {"tail": [{"cause": "fork()", "ms": 1.0}], "slow": [], "bands": {"fork()": [(0, 1)]}}
    rows = [{"config": {"name": "a"}, "table": {"default": {"fork_ms": 9, "attribution": att},
                                                "async": {"fork_ms": 1}}}]
    record = bench_redis.record_of({"kind": "bench-redis"}, rows)
    got = record["runs"][0]["table"]
    assert got["default"]["attribution"] == {"tail": att["tail"], "slow": []}
    assert got["default"]["fork_ms"] == 9 and got["async"] == {"fork_ms": 1}
    assert record["kind"] == "bench-redis" and "analysed_commit" in record
    assert "bands" in rows[0]["table"]["default"]["attribution"]  # the run's own copy
