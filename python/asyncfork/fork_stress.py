# SPDX-License-Identifier: GPL-2.0
"""fork_stress's runs read back, and the judgement of a boot's programs
that make soak and make test-deb share: each program by the suite's
verdict and the skips asyncfork.skips allows, each fork_stress run by its
counters (one that expected Async-fork, -a, fails if it deferred
nothing), one line a program printed."""

import re
from pathlib import Path

from asyncfork import programs, skips
from asyncfork import suite as harness

# fork_stress's per-run counters (the parent's forks, how many of them
# deferred page tables, and /proc/vmstat deltas; -1 where it could not read
# a counter), printed with or without KTAP's "# ", e.g.
#   fork_stress: forks 290, deferred 261 (90%), syncs 1204, child copies 5230, errors 0
COUNTERS_RE = re.compile(
    r"^(?:#\s*)?fork_stress: forks (?P<forks>-?\d+), deferred (?P<deferred>-?\d+) "
    r"\((?P<pct>-?\d+(?:\.\d+)?)%\), syncs (?P<syncs>-?\d+), "
    r"child copies (?P<copies>-?\d+), errors (?P<errors>-?\d+)\s*$", re.M)
# fork_stress's first KTAP result: how many children it reaped and judged
# (each compared its snapshot; with -F some were killed by a failed copy):
#   ok 1 snapshots exact: 290 children (3 killed by a failed copy, 0 forks failed)
#   not ok 1 snapshots exact: 2 of 57 children found a difference
CHILDREN_RE = re.compile(
    r"^(?:not )?ok \d+ snapshots exact: (?:(?P<bad>\d+) of )?(?P<n>\d+) children"
    r"(?: \((?P<killed>\d+) killed by a failed copy)?", re.M)

COUNTER_FIELDS = ("forks", "forks_deferred", "syncs", "child_copies", "errors")


def parse(text: str) -> dict:
    """The counters of one fork_stress run's output; None where the run
    did not print them (the last line of each kind counts)."""
    out = dict.fromkeys(COUNTER_FIELDS + ("children_checked", "children_killed"))
    m = None
    for m in COUNTERS_RE.finditer(text):
        pass
    if m:
        for key, group in zip(COUNTER_FIELDS, ("forks", "deferred", "syncs", "copies", "errors")):
            val = int(m[group])
            out[key] = val if val >= 0 else None
    m = None
    for m in CHILDREN_RE.finditer(text):
        pass
    if m:
        out["children_checked"] = int(m["n"])
        if m["killed"] is not None:
            out["children_killed"] = int(m["killed"])
    return out


def total(runs: list[dict], key: str) -> int | None:
    """The sum of @key over @runs; None if any run lacks it (a partial sum
    would look like a whole one) or there is no run."""
    vals = [r[key] for r in runs]
    return None if not vals or None in vals else sum(vals)


def is_program(p: harness.Program) -> bool:
    """@p runs fork_stress (as its last command)."""
    return Path(programs.last_command(p.command)[0]).name == "fork_stress"


def expects_async(p: harness.Program) -> bool:
    """fork_stress -a: every fork of the run must be asynchronous."""
    return "-a" in programs.last_command(p.command)[1:]


def runs(run: harness.SuiteRun, progs: list[harness.Program]) -> list[dict]:
    """One entry per fork_stress run of the boot, failed and repeated runs
    included: program, which run, whether it expected Async-fork, counters."""
    out = []
    for p in progs:
        r = run.results.get(p.name)
        if not is_program(p) or r is None or not r.ran:
            continue
        for i, text in enumerate(r.failed_runs + [r.output], 1):
            out.append({"program": p.name, "run": i, "expect_async": expects_async(p),
                        **parse(text)})
    return out


def judge(run: harness.SuiteRun, progs: list[harness.Program],
          runs: list[dict], config: str = "") -> dict[str, list[str]]:
    """The problems of each program: the suite's judgement, a skipped case
    that asyncfork.skips does not allow on @config (with none, no skip is
    allowed), and, for a fork_stress run that expected Async-fork, a run
    that deferred nothing."""
    problems = {p.name: skips.verdict(run, p.name, config) for p in progs}
    for s in runs:
        if s["expect_async"] and s["forks_deferred"] == 0:
            problems[s["program"]].append(
                f"{s['program']} (run {s['run']}): Async-fork deferred nothing in "
                f"{s['forks']} forks, but the run expected asynchronous forks (-a)")
    return problems


def print_judgement(prefix: str, run: harness.SuiteRun, progs: list[harness.Program],
                    problems: dict[str, list[str]], config: str = "") -> None:
    """One line per program, pass or FAIL, with its cases and skips, then
    its problems, the reasons of its allowed skips and the tails of its
    repeated runs."""
    skipped = skips.program_skips(run, [p.name for p in progs], config)
    for p in progs:
        r = run.results[p.name]
        s = skipped.get(p.name, skips.Skips())
        print(f"{prefix}{p.name}: {'FAIL' if problems[p.name] else 'pass'} ({r.elapsed:.0f} s, "
              f"{len(r.cases)} cases, {s.count} skipped)")
        for line in problems[p.name]:
            print("    " + line.replace("\n", "\n    "))
        for case, why in s.allowed:
            print(f"    skipped {case}: {why}")
        for i, failed_out in enumerate(r.failed_runs, 1):
            print(f"    run {i} failed and was repeated; its output tail:\n      " +
                  harness.vm.tail(failed_out, 20).replace("\n", "\n      "))
