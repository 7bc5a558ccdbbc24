"""make soak: the randomized tests of the suite, for as long as asked.

Boots the debug kernel once and runs fork_stress (pins, NUMA migration,
KSM; a memory cgroup with swap; injected allocation failures), stress-ng's
memory stressors and the Redis digest check, every fork asynchronous, the
time split between them.  Judged as the suite judges a program: exit code,
KTAP cases, and no kernel report in the log.

Swap is on a loop device by default: with zram, the memory-cgroup run
meets zeros that the unpatched kernel shows too
(docs/findings/memcg-zeros.md); `--swap zram` runs into them.
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402
import programs  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30,
                    help="total run time of the programs (default 30)")
    ap.add_argument("--kernel", default=str(programs.BUILD / "debug"))
    ap.add_argument("--memory", default="4G")
    ap.add_argument("--cpus", type=int, default=3)
    ap.add_argument("--swap", choices=("loop", "zram"), default="loop",
                    help="swap device of the guest (default loop)")
    a = ap.parse_args()
    if a.minutes <= 0:
        ap.error("--minutes must be positive")
    # Four timed programs share 90% of the time; Redis snapshots the rest
    # (about 40 s each under emulation).
    seconds = max(30, int(a.minutes * 60 * 0.9 / 4))
    snapshots = max(2, int(a.minutes * 60 * 0.1 / 40 / 4))
    progs = programs.stress_programs(seconds, snapshots)
    if a.swap == "loop":
        # The suite's retry is for the zram finding; on loop swap any
        # failed run is a failure.
        for p in progs:
            p.retries = 0
    missing = programs.missing(progs)
    if missing:
        print(f"soak: not built: {', '.join(missing)}: run 'make soak'", file=sys.stderr)
        return 2
    out = programs.BUILD / "results/soak"
    print(f"soak: {Path(a.kernel).name} kernel, {seconds} s per stress program, "
          f"{snapshots} Redis snapshots per configuration, swap on {a.swap}; "
          f"results in {out}", flush=True)
    start = time.time()
    run = harness.run_suite(Path(a.kernel), progs, out, memory=a.memory,
                            cpus=a.cpus, numa_nodes=2, swap=a.swap)
    failed = 0
    for p in progs:
        problems = run.problems(p.name)
        r = run.results[p.name]
        print(f"soak: {p.name}: {'FAIL' if problems else 'pass'} ({r.elapsed:.0f} s, "
              f"{len(r.cases)} cases)")
        for line in problems:
            print("    " + line.replace("\n", "\n    "))
        for i, failed_out in enumerate(r.failed_runs, 1):
            print(f"    run {i} failed and was repeated; its output tail:\n      " +
                  harness.vm.tail(failed_out, 20).replace("\n", "\n      "))
        failed += bool(problems)
    reports = run.vm.reports or []
    if reports:
        print("soak: kernel reports in the console log:\n" + "\n\n".join(reports))
    swaps = out / "swaps"
    if swaps.exists():
        print("soak: guest swap:\n    " + swaps.read_text().strip().replace("\n", "\n    "))
    print(f"soak: {len(progs) - failed} of {len(progs)} programs passed in "
          f"{(time.time() - start) / 60:.1f} min ({run.kernelrelease})")
    return 1 if failed or reports else 0


if __name__ == "__main__":
    sys.exit(main())
