# SPDX-License-Identifier: GPL-2.0
"""Reproduce a snapshot difference of the package soak: fork_stress (pins,
NUMA migration, KSM, khugepaged) on the packaged kernel with Debian's
walkers on (KSM merging everything, DAMON, MGLRU aging, proactive
reclaim), as make soak KERNEL=deb runs it, --runs times --seconds each, in
one boot, with vm.async_fork=2 (Async-fork) or 0 (the default fork).

    .venv/bin/python tests/repro/deb_fork_stress.py --async-fork 0 \\
        --fork-stress build/selftests/fork_stress --out build/results/repro-0

A difference prints the child's and its first parent's pagemap entry and
kpageflags for the page (fork_stress's describe_mapping()).
"""

import argparse
import sys
from pathlib import Path

from asyncfork import package
from asyncfork import suite as harness
from asyncfork.paths import BUILD


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--async-fork", type=int, choices=(0, 2), required=True)
    ap.add_argument("--fork-stress", required=True, help="the fork_stress binary")
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--flavour", default="cloud-amd64")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    deb = package.find_package(BUILD / "debs" / a.flavour)
    image = package.unpack(deb, BUILD / "test-deb" / a.flavour)
    defer = " -D 80" if a.async_fork else ""
    cmd = (f"sysctl -qw vm.async_fork={a.async_fork} vm.async_fork_copy_threads=2 && "
           f"{Path(a.fork_stress).resolve()} {'-a ' if a.async_fork else ''}"
           f"-t {a.seconds} -d -n -k{defer}")
    walkers = package.GUEST / "walkers.sh"
    progs = [package.cfs_bandwidth_on(), harness.Program("walkers_on", 60, f"{walkers} on")]
    progs += [package.under_ksm(harness.Program(f"fork_stress_{i}", 2 * a.seconds + 240, cmd))
              for i in range(a.runs)]
    print(f"repro: {deb.name}, vm.async_fork={a.async_fork}, {a.runs} x {a.seconds} s",
          flush=True)
    run = harness.run_suite(image, progs, Path(a.out).resolve(), memory="4G", cpus=3,
                            numa_nodes=2, swap="zram", boot_timeout=180,
                            tcg_single=True, keep_thp=True, root_fs="virtiofs")
    bad = 0
    for p in progs[2:]:
        ok = not run.problems(p.name)
        bad += not ok
        print(f"repro: {p.name}: {'pass' if ok else 'FAIL'}")
    reports = run.vm.reports or []
    print(f"repro: {bad} of {a.runs} runs failed, {len(reports)} kernel reports")
    return 1 if bad or reports else 0


if __name__ == "__main__":
    sys.exit(main())
