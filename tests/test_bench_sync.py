# SPDX-License-Identifier: GPL-2.0
"""asyncfork.bench_sync (make bench-sync): its kernel list, its summary of
forkbench --touch lines, its refusal of bad input; and forkbench --touch
itself on this machine (default fork: the parent's timed writes and the
child's check of its snapshot)."""

import json
import subprocess

import pytest

from conftest import BUILD, need

from asyncfork import bench_sync


def test_kernels_named_or_by_folder():
    assert bench_sync.parse_kernels("before=build/a,after=/x/lean") == [
        ("before", bench_sync.Path("build/a")), ("after", bench_sync.Path("/x/lean"))]
    assert bench_sync.parse_kernels("build/lean")[0][0] == "lean"
    with pytest.raises(ValueError):
        bench_sync.parse_kernels("a=x,a=y")


def row(asyn, fork_us, p50, p99, mx, over, n=512):
    return {"async": asyn, "fork_us": fork_us, "touch_p50_us": p50, "touch_p99_us": p99,
            "touch_max_us": mx, "touch_over_1ms": over, "touch_n": n}


def test_summary_per_mode():
    rows = [row(False, 100000, 5, 9, 40, 0), row(False, 120000, 6, 11, 900, 0),
            row(False, 110000, 5, 10, 50, 0),
            row(True, 2000, 30, 300, 2500, 2), row(True, 1000, 20, 200, 800, 0)]
    s = bench_sync.summarize(rows)
    assert s["default"]["forks"] == 3 and s["default"]["fork_ms_median"] == 110
    assert s["default"]["touch_max_us"] == 900 and s["default"]["touches_over_1ms"] == 0
    assert s["async"]["fork_ms_median"] == 1.5
    assert s["async"]["touch_p99_us_median"] == 250
    assert s["async"]["touch_max_us"] == 2500
    assert s["async"]["touches_over_1ms"] == 2 and s["async"]["touches"] == 1024
    md = bench_sync.table({"after": s})
    assert "| after | async | 2 | 1.50 | 25.0 | 250.0 | 2500.0 | 2 of 1024 |" in md


@pytest.mark.parametrize("args", [["--kernels", "a=x,a=y"], ["--repeat", "0"],
                                  ["--boots", "0"], ["--size-mb", "1"], ["--hogs", "-1"],
                                  ["--kernels", "nothing=/nonexistent"]])
def test_bad_input_is_refused(args):
    assert bench_sync.main(args) == 2


def forkbench(*args):
    prog = BUILD / "bench/forkbench"
    need(prog, "no build/bench/forkbench: run make bench-programs")
    return subprocess.run([str(prog), *args], capture_output=True, text=True, timeout=120)


def test_forkbench_touch_times_every_table_and_checks_the_child():
    r = forkbench("--size-mb", "64", "--repeat", "2", "--touch", "--hogs", "1")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(rows) == 2
    for x in rows:
        assert x["touch_n"] == 32 and x["hogs"] == 1
        assert 0 < x["touch_p50_us"] <= x["touch_p99_us"] <= x["touch_max_us"]
        assert 0 <= x["touch_over_1ms"] <= 32


@pytest.mark.parametrize("args", [["--size-mb", "64", "--hogs", "-1"],
                                  ["--size-mb", "64", "--hogs", "65"],
                                  ["--size-mb", "1", "--touch"]])
def test_forkbench_refuses_bad_touch_arguments(args):
    r = forkbench(*args)
    assert r.returncode in (1, 2) and r.stderr and not r.stdout
