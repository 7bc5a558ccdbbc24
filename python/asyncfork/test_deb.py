# SPDX-License-Identifier: GPL-2.0
"""make test-deb: the packaged kernel, tested as shipped.

Unpacks the linux-image package that `make deb` built (BUILD/debs/FLAVOUR/)
and boots its kernel image with its own modules under virtme-ng (which
loads the modules the guest needs from the package's lib/modules), twice:

  1. "defaults": Debian's settings left as they are (THP "always", the
     multi-gen LRU on, NUMA balancing on, KSM and DAMON built in but idle),
     on two NUMA nodes (fork_stress migrates between them):
     fork_snapshot with the default fork and with every fork asynchronous,
     async_fork, a short fork_stress and the Redis digest check.
  2. "walkers": the same programs, each started with its
     memory mergeable by KSM (tests/guest/ksm-merge), ksmd scanning,
     DAMON's reclaim module on, and MGLRU aging (with page-table walks)
     and proactive reclaim every two seconds (tests/guest/walkers.sh); a
     last program checks that each of those walkers did act.

Judged as the suite judges a program (exit code, KTAP cases, no kernel
report in the log); a skipped case fails unless asyncfork.skips says why
for this package (no fault injection, no GUP_TEST), and the record counts
the skips.  Writes BUILD/results/test-deb-FLAVOUR-DATE.json whether
it passed or not.
"""

import subprocess
import sys
import time
from pathlib import Path

from asyncfork import entry, fork_stress, package, paths, programs, results, skips, vm
from asyncfork import suite as harness
from asyncfork.paths import BUILD, RESULTS


def default_flavour(arch: str) -> str:
    return "cloud-arm64" if arch == "arm64" else "cloud-amd64"


def tcg_single(arch: str) -> bool:
    """One host thread for all vCPUs of an x86 guest: Debian's x86 kernel
    oopses with int3 at a static-key site under QEMU 7.2's multi-threaded
    TCG (docs/findings/distro-kernel-test-deb.md, section 1).  arm64
    patches its code under stop_machine, with no breakpoint step, and its
    guests run multi-threaded as make test ARCH=arm64 runs them."""
    return arch == "x86"


def shipped_programs(stress_seconds: int) -> list[harness.Program]:
    """fork_snapshot both ways, async_fork, a short fork_stress, Redis."""
    own = {p.name: p for p in programs.own_programs()}
    stress = {p.name: p for p in programs.stress_programs(stress_seconds, 1, 20000)}
    return [own["fork_snapshot"], own["fork_snapshot_async"], own["async_fork"],
            stress["fork_stress"], stress["redis_digest"]]


def walker_programs(stress_seconds: int) -> list[harness.Program]:
    walkers = package.GUEST / "walkers.sh"
    progs = [harness.Program("walkers_on", 60, f"{walkers} on")]
    progs += [package.under_ksm(p) for p in shipped_programs(stress_seconds)]
    progs.append(harness.Program("walkers_check", 60, f"{walkers} check"))
    return progs


def skip_config(flavour: str, arch: str | None = None) -> str:
    """The package's configuration for asyncfork.skips: ARCH/deb-FLAVOUR."""
    return skips.config(f"deb-{flavour}", arch)


def judge_boot(label: str, run: harness.SuiteRun, progs: list[harness.Program],
               config: str) -> dict:
    """The record of one boot: each program judged as make soak judges it
    (skips allowed only as asyncfork.skips says for @config), skips counted."""
    runs = fork_stress.runs(run, progs)
    problems = fork_stress.judge(run, progs, runs, config)
    reports = run.vm.reports or []
    fork_stress.print_judgement(f"test-deb: {label}: ", run, progs, problems, config)
    if reports:
        print(f"test-deb: {label}: kernel reports in the console log:\n" + "\n\n".join(reports))
    skipped = skips.program_skips(run, [p.name for p in progs], config)
    return {
        "kernel": run.kernelrelease,
        "seconds": round(run.vm.elapsed, 1),
        "kernel_reports": len(reports),
        "skip_config": config,
        "skipped": sum(s.count for s in skipped.values()),
        "skipped_unexplained": sum(len(s.unexplained) for s in skipped.values()),
        "passed": not any(problems.values()) and not reports,
        "programs": {p.name: {"passed": not problems[p.name],
                              "seconds": round(run.results[p.name].elapsed, 1),
                              **skips.record(skipped.get(p.name, skips.Skips())),
                              "problems": [s.splitlines()[0] for s in problems[p.name]]}
                     for p in progs},
        "fork_stress_runs": runs,
        "walkers": (run.results["walkers_check"].output
                    if "walkers_check" in run.results else None),
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = entry.parser(__doc__)
    ap.add_argument("--flavour", default=default_flavour(paths.ARCH),
                    help="as for make deb (default cloud-amd64, or cloud-arm64 with ARCH=arm64)")
    ap.add_argument("--build", default=str(BUILD),
                    help="the build folder of make deb (default build)")
    ap.add_argument("--memory", default="4G")
    ap.add_argument("--cpus", type=int, default=3)
    ap.add_argument("--stress-seconds", type=int, default=60,
                    help="fork_stress run time in each boot (default 60)")
    ap.add_argument("--record-dir", default=str(RESULTS))
    a = ap.parse_args(argv)
    build = Path(a.build)
    deb = package.find_package(build / "debs" / a.flavour)
    image = package.unpack(deb, build / "test-deb" / a.flavour)
    missing = programs.missing(shipped_programs(a.stress_seconds))
    if missing:
        print(f"test-deb: not built: {', '.join(missing)}: run 'make test-deb'", file=sys.stderr)
        return 2
    if paths.foreign():
        package.link_modules(build / "test-deb" / a.flavour / "root", vm.ARM64_ROOT)
    print(f"test-deb: {deb.name}: booting {image.name} with its modules, twice", flush=True)
    start = time.time()
    single = tcg_single(paths.ARCH)
    boots = {}
    progs = [package.cfs_bandwidth_on()] + shipped_programs(a.stress_seconds)
    run = harness.run_suite(image, progs, build / "results/test-deb-defaults",
                            memory=a.memory, cpus=a.cpus, numa_nodes=2, swap="zram",
                            keep_thp=True, root_fs="virtiofs", tcg_single=single)
    config = skip_config(a.flavour)
    boots["defaults"] = judge_boot("defaults", run, progs, config)
    progs = [package.cfs_bandwidth_on()] + walker_programs(a.stress_seconds)
    run = harness.run_suite(image, progs, build / "results/test-deb-walkers",
                            memory=a.memory, cpus=a.cpus, numa_nodes=2, swap="zram",
                            keep_thp=True, root_fs="virtiofs", tcg_single=single)
    boots["walkers"] = judge_boot("walkers", run, progs, config)
    finished = time.time()
    version = subprocess.run(["dpkg-deb", "-f", str(deb), "Version"], capture_output=True,
                             text=True, check=True).stdout.strip()
    record = {
        **results.metadata("test-deb", kernels=[results.kernel(
            image=image, label=a.flavour, async_fork="set by each program")],
            machine_info=results.machine(a.cpus, a.memory, 2, "zram", tcg_single=single),
            argv=argv, args=vars(a),
            started=start),
        "package": deb.name,
        "package_version": version,
        "package_sha256": package.sha256(deb),
        "flavour": a.flavour,
        "seconds": round(finished - start, 1),
        "passed": all(b["passed"] for b in boots.values()),
        "boots": boots,
    }
    path = results.write(record, Path(a.record_dir), f"test-deb-{a.flavour}")
    print(f"test-deb: {'passed' if record['passed'] else 'FAILED'} in "
          f"{(finished - start) / 60:.1f} min; record {path}")
    return 0 if record["passed"] else 1


if __name__ == "__main__":
    sys.exit(entry.run(main, "test-deb"))
