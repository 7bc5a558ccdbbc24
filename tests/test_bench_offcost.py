# SPDX-License-Identifier: GPL-2.0
"""asyncfork.bench_offcost's reading of offcost's output and its summary: medians,
spread and ratios to the unpatched kernel, and its refusal of bad input."""

import subprocess

import pytest

from conftest import BUILD, need

from asyncfork import bench_offcost


def test_parse_keeps_only_result_lines():
    console = ("[    1.0] random kernel line RESULT x\n"
               "RESULT fork_exit 0 100.0 us/op\nRESULT fork_exit 1 110.5 us/op\n"
               "RESULT odirect 0 7.25 us/op\nnoise RESULT\n")
    assert bench_offcost.parse(console) == {"fork_exit": [100.0, 110.5], "odirect": [7.25]}


def test_summary_medians_spread_and_ratios():
    values = {"unpatched": {"fork_exit": [100, 110, 90]},
              "y": {"fork_exit": [120, 118, 122]},
              "n": {"fork_exit": [99, 100, 101]}}
    s = bench_offcost.summarize(values)
    assert s["unpatched"]["fork_exit"]["median"] == 100
    assert s["unpatched"]["fork_exit"]["spread_pct"] == pytest.approx(20)
    assert s["unpatched"]["fork_exit"]["ratio"] == 1
    assert s["y"]["fork_exit"]["ratio"] == pytest.approx(1.2)
    assert s["n"]["fork_exit"]["ratio"] == pytest.approx(1.0)
    md = bench_offcost.table(s, {"fork_exit": "us/op"})
    assert "| fork_exit | us/op | 100 (±10%) | 120 (±2%, x1.200) | 100 (±1%, x1.000) |" in md


@pytest.mark.parametrize("args", [["--boots", "0"], ["--runs", "0"]])
def test_bad_counts_are_refused(args):
    assert bench_offcost.main(args) == 2


def test_offcost_program_refuses_bad_arguments():
    prog = BUILD / "bench/offcost"
    need(prog, "no build/bench/offcost: run make bench-programs")
    for args in (["--bogus"], ["--runs", "0"], ["--only", "nope"]):
        r = subprocess.run([str(prog), *args], capture_output=True, text=True, timeout=10)
        assert r.returncode == 2 and r.stderr, args


def test_one_slow_run_does_not_inflate_the_interval():
    base = [100, 101, 99, 100, 102, 98, 100, 101, 99, 100, 100, 101, 99, 100, 102]
    other = [x * 1.01 for x in base[:-1]] + [500]     # 1% slower, and one run 5 times
    s = bench_offcost.summarize({"unpatched": {"fork_exit": base}, "y": {"fork_exit": other}})
    y = s["y"]["fork_exit"]
    assert y["spread_pct"] / 2 > 190                  # the half-range: that one run
    lo, hi = y["ci_pct"]
    assert lo <= y["diff_pct"] <= hi
    assert -2 < lo and hi < 3                         # the interval: the 1%, not the run
    assert "ci_pct" not in s["unpatched"]["fork_exit"]


def test_the_interval_is_seeded():
    v = {"unpatched": {"odirect": [250, 253, 252, 250, 257, 263, 513, 325]},
         "n": {"odirect": [262, 275, 269, 253, 252, 258, 359, 271]}}
    assert bench_offcost.summarize(v) == bench_offcost.summarize(v)
    assert bench_offcost.median_diff_ci([1, 2, 3, 4], [2, 3, 4, 5], resamples=200, seed=7) == \
        bench_offcost.median_diff_ci([1, 2, 3, 4], [2, 3, 4, 5], resamples=200, seed=7)
    lo, hi = bench_offcost.median_diff_ci([10.0] * 5, [11.0] * 5)
    assert lo == pytest.approx(10) and hi == pytest.approx(10)


def test_the_table_shows_the_interval():
    values = {"unpatched": {"fork_exit": [100, 110, 90]},
              "y": {"fork_exit": [120, 118, 122]},
              "n": {"fork_exit": [99, 100, 101]}}
    s = bench_offcost.summarize(values)
    md = bench_offcost.table(s, {"fork_exit": "us/op"})
    head, rule, row = md.splitlines()
    assert head == "| test | unit | unpatched | y | n | Δ y | Δ n |"
    assert rule == "|---|---|---|---|---|---|---|"
    lo, hi = s["y"]["fork_exit"]["ci_pct"]
    assert row.endswith(f"| +20.0% [{lo:+.1f}, {hi:+.1f}] | "
                        f"{bench_offcost.ci_cell(s['n']['fork_exit'])} |")
    assert "bootstrap" in bench_offcost.LEGEND and str(bench_offcost.SEED) in bench_offcost.LEGEND


def test_the_record_names_its_machine(monkeypatch):
    asked = []
    machine = {"host": "vm", "host_virtualization": "docker", "host_cpu": "AMD EPYC",
               "host_cpus": 2, "host_memory_mb": 24105, "host_kernel": "6.18.44",
               "accel": "tcg", "guest_cpus": 2, "guest_memory": "3G"}
    monkeypatch.setattr(bench_offcost.results, "machine", lambda *a: asked.append(a) or machine)
    kernels = [{"label": n, "release": "6.12.117", "flavour": "lean", "config_sha256": None,
                "async_fork": "absent"} for n in ("unpatched", "y", "n")]
    values = {"unpatched": {"fork_exit": [100, 110, 90]}, "y": {"fork_exit": [120, 118, 122]},
              "n": {"fork_exit": [99, 100, 101]}}
    rec = bench_offcost.make_record(values, {"fork_exit": "us/op"}, kernels, argv=[], args={},
                              started=1795600000.0, seconds=60)
    assert asked == [(bench_offcost.CPUS, bench_offcost.MEMORY)]
    assert rec["kind"] == "bench-offcost" and rec["machine"] == machine
    assert rec["bootstrap"] == {"resamples": bench_offcost.RESAMPLES, "seed": bench_offcost.SEED,
                                "level": bench_offcost.LEVEL}
    assert rec["summary"] == bench_offcost.summarize(values)
    md = bench_offcost.markdown(rec)
    assert md.endswith("machine: a guest of 2 vCPUs and 3G under TCG on AMD EPYC, 2 CPUs, "
                       "24105 MiB, kernel 6.18.44, itself a VM (docker)")
