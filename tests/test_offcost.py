# SPDX-License-Identifier: GPL-2.0
"""asyncfork.offcost's reading of offcost's output and its summary: medians,
spread and ratios to the unpatched kernel, and its refusal of bad input."""

import subprocess

import pytest

from conftest import BUILD, need

from asyncfork import offcost


def test_parse_keeps_only_result_lines():
    console = ("[    1.0] random kernel line RESULT x\n"
               "RESULT fork_exit 0 100.0 us/op\nRESULT fork_exit 1 110.5 us/op\n"
               "RESULT odirect 0 7.25 us/op\nnoise RESULT\n")
    assert offcost.parse(console) == {"fork_exit": [100.0, 110.5], "odirect": [7.25]}


def test_summary_medians_spread_and_ratios():
    values = {"unpatched": {"fork_exit": [100, 110, 90]},
              "y": {"fork_exit": [120, 118, 122]},
              "n": {"fork_exit": [99, 100, 101]}}
    s = offcost.summarize(values)
    assert s["unpatched"]["fork_exit"]["median"] == 100
    assert s["unpatched"]["fork_exit"]["spread_pct"] == pytest.approx(20)
    assert s["unpatched"]["fork_exit"]["ratio"] == 1
    assert s["y"]["fork_exit"]["ratio"] == pytest.approx(1.2)
    assert s["n"]["fork_exit"]["ratio"] == pytest.approx(1.0)
    md = offcost.table(s, {"fork_exit": "us/op"})
    assert "| fork_exit | us/op | 100 (±10%) | 120 (±2%, x1.200) | 100 (±1%, x1.000) |" in md


@pytest.mark.parametrize("args", [["--boots", "0"], ["--runs", "0"]])
def test_bad_counts_are_refused(args):
    assert offcost.main(args) == 2


def test_offcost_program_refuses_bad_arguments():
    prog = BUILD / "bench/offcost"
    need(prog, "no build/bench/offcost: run make bench-programs")
    for args in (["--bogus"], ["--runs", "0"], ["--only", "nope"]):
        r = subprocess.run([str(prog), *args], capture_output=True, text=True, timeout=10)
        assert r.returncode == 2 and r.stderr, args
