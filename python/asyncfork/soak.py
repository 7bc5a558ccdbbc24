# SPDX-License-Identifier: GPL-2.0
"""make soak: the randomized tests of the suite, for as long as asked.

Boots one guest kernel (build/debug by default; `--kernel kasan` boots
build/kasan, `make soak KERNEL=kasan`; `make soak KERNEL=deb` the package
of make deb, with Debian's walkers acting as in make test-deb's second
boot: KSM merging every program's memory, DAMON paging it out, MGLRU aging,
proactive reclaim, THP always, two NUMA nodes) once and runs fork_stress (pins, NUMA
migration, KSM; a memory cgroup with swap; injected allocation failures),
stress-ng's memory stressors and the Redis digest check, every fork
asynchronous, the time split between them.  Judged as the suite judges a
program: exit code, KTAP cases, and no kernel report in the log; a
skipped case fails it unless asyncfork.skips says why for this kernel;
and a fork_stress run that expected asynchronous forks (-a) fails if
Async-fork deferred nothing in it (asyncfork.fork_stress).

Every soak ends by writing one JSON record, BUILD/results/soak-KERNEL-DATE.json
(asyncfork.results' metadata, then asyncfork.soak_record's fields), whether it
passed or not; a record worth keeping is committed under docs/results/.

Swap is on zram by default, as in the suite: its swap-ins may skip the
swap cache, the path where 6.12 lost pages (docs/findings/madv-free-swapin.md,
fixed by kernel/patches/mm-fixes); `--swap loop` swaps to a loop device.
No program is repeated: any failed run is a failure.
"""

import argparse
import sys
import time
from pathlib import Path

from asyncfork import (entry, fork_stress, package, profiles, programs, results, skips,
                       soak_record)
from asyncfork import suite as harness
from asyncfork.paths import BUILD, RESULTS

RECORD_DIR = RESULTS

# Program timeouts (and the boot's) are multiplied by this for a kernel
# profile that runs the kernel's side slower: sanitizers under emulation.
TIMEOUT_FACTOR = {"kasan": 2.0, "kcsan": 3.0}

# The timed programs of programs.stress_programs() and how many times their
# seconds each takes (stress-ng runs two stressors in turn).
TIMED = ("fork_stress", "fork_stress_memcg", "fork_stress_faults", "stress-ng")
TIME_SHARES = {"stress-ng": 2}
# Left out on a kernel without fault injection (the package's).
NO_FAULT_INJECTION = {"fork_stress_faults"}


def soak_programs(minutes: float, packaged: bool) -> tuple[int, int, list[harness.Program]]:
    """(seconds per timed program, Redis snapshots, the programs) of a soak
    of @minutes.  The timed programs share all of the time (stress-ng runs
    two stressors one after the other: two shares), so that a soak of N
    minutes lasts at least N; Redis's snapshots (about 40 s each under
    emulation, a tenth of the time) come on top.  Debian's config has no
    fault injection (CONFIG_FAULT_INJECTION is not set), so the package
    runs without fork_stress_faults, which would only bail out."""
    skip = NO_FAULT_INJECTION if packaged else set()
    shares = sum(TIME_SHARES.get(n, 1) for n in TIMED if n not in skip)
    seconds = max(30, -(-int(minutes * 60) // shares))
    snapshots = max(2, int(minutes * 60 * 0.1 / 40 / 4))
    progs = [p for p in programs.stress_programs(seconds, snapshots) if p.name not in skip]
    return seconds, snapshots, progs


def mmss(seconds: float) -> str:
    return f"{int(seconds) // 60}:{int(seconds) % 60:02d}"


def heartbeat_line(progress: harness.Progress, outdir: Path, elapsed: float, minutes: float,
                   stress_names: set[str] | None = None) -> str:
    """The soak's heartbeat: time, the program running, programs done and
    how many exited non-zero, the counters of the fork_stress runs done so
    far (of the programs @stress_names, default those named fork_stress*)
    and the kernel reports in the console log so far."""
    n = len(progress.names)
    running = (f"{progress.current} running "
               f"({harness.fmt_seconds(progress.clock() - progress.started)})"
               if progress.current else "between programs" if progress.finished else "booting")
    bad = sum(f.rc != 0 for f in progress.finished)
    runs = []
    for f in progress.finished:
        if (f.name in stress_names if stress_names is not None
                else f.name.startswith("fork_stress")):
            try:
                runs.append(fork_stress.parse((outdir / f"{f.name}.out").read_text(
                    errors="replace")))
            except OSError:
                runs.append(fork_stress.parse(""))
    if runs:
        def count(key):
            v = fork_stress.total(runs, key)
            return "?" if v is None else v
        counters = (f"fork_stress so far: forks {count('forks_deferred')} of "
                    f"{count('forks')} deferred, {count('children_checked')} children checked")
    else:
        counters = "no fork_stress run done yet"
    try:
        reports = len(harness.vm.kernel_reports(
            (outdir / "console.log").read_text(errors="replace")))
    except OSError:
        reports = 0
    return (f"heartbeat {mmss(elapsed)} of about {mmss(minutes * 60)}: {running}, "
            f"{len(progress.finished)} of {n} done, {bad} exited non-zero; "
            f"{counters}; kernel reports {reports}")


DPKG_STATUS = Path("/var/lib/dpkg/status")


def packages_stamp(status: Path = DPKG_STATUS) -> float | None:
    """When the host's package database last changed (None without dpkg)."""
    try:
        return status.stat().st_mtime
    except OSError:
        return None


def host_changed_note(before: float | None, after: float | None) -> str | None:
    """Why a run is suspect if the host's packages changed while it ran:
    the guest sees the host's root, and a program it starts after an
    upgrade can load a replaced library through a stale view of it (the
    KASAN soak of 2026-11-26: stress-ng and python segfaulted in ld.so an
    hour after an apt run on the host)."""
    if before is None or after is None or before == after:
        return None
    return (f"the host's packages changed during the run ({DPKG_STATUS} modified at "
            f"{results.utc(after)}): a program the guest started later may have loaded a "
            f"replaced library; run again with the host left alone")


def kernel_dir(name: str) -> Path:
    """--kernel NAME is build/NAME; a value with a slash is a folder."""
    return Path(name) if "/" in name else BUILD / name


def unknown_kernel(name: str) -> str | None:
    """Why --kernel NAME names no kernel: not deb, no folder (a slash) and
    no profile of kernel/configs/profiles; None if it does."""
    known = profiles.names()
    if name == "deb" or "/" in name or name in known:
        return None
    return (f"--kernel {name}: not a profile of kernel/configs/profiles "
            f"({', '.join(known)}), deb, or a build folder (with a slash)")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = entry.parser(__doc__)
    ap.add_argument("--minutes", type=float, default=30,
                    help="total run time of the programs (default 30)")
    ap.add_argument("--kernel", default="debug",
                    help="kernel profile NAME of kernel/configs/profiles, booted from "
                         "build/NAME (default debug; kasan, kcsan, lean, ...), a build "
                         "folder (with a slash), or deb: the "
                         "package make deb built (--flavour), with Debian's walkers "
                         "acting as in make test-deb's second boot")
    ap.add_argument("--flavour", default="cloud-amd64",
                    help="with --kernel deb: the package's flavour (default cloud-amd64)")
    ap.add_argument("--memory", default="4G")
    ap.add_argument("--cpus", type=int, default=3)
    ap.add_argument("--swap", choices=("loop", "zram"), default="zram",
                    help="swap device of the guest (default zram)")
    ap.add_argument("--timeout-factor", type=float, default=None,
                    help="multiply program timeouts by this (default 2 for kasan, "
                         "3 for kcsan, else 1)")
    ap.add_argument("--tcg-single", action=argparse.BooleanOptionalAction, default=None,
                    help="under TCG, run every vCPU on one host thread (default: only "
                         "with --kernel deb; QEMU 7.2's multi-threaded TCG can corrupt "
                         "a static-key switch, see tests/repro/cfs_key_toggle.sh)")
    ap.add_argument("--heartbeat", type=float, default=120, metavar="SECONDS",
                    help="print the soak's counters this often (default 120; 0: never)")
    ap.add_argument("--record-dir", default=str(RECORD_DIR),
                    help="where the JSON record goes (default BUILD/results)")
    a = ap.parse_args(argv)
    if a.minutes <= 0:
        ap.error("--minutes must be positive")
    if why := unknown_kernel(a.kernel):
        ap.error(why)
    packaged = a.kernel == "deb"
    tcg_single = packaged if a.tcg_single is None else a.tcg_single
    image = None
    if packaged:
        debs = BUILD / "debs" / a.flavour
        try:
            deb = package.find_package(debs)
        except SystemExit as e:
            print(f"soak: {e}", file=sys.stderr)
            return 2
        image = package.unpack(deb, BUILD / "test-deb" / a.flavour)
        kdir, name = image, f"deb-{a.flavour}"
    else:
        kdir = kernel_dir(a.kernel)
        name = kdir.name
    factor = a.timeout_factor or TIMEOUT_FACTOR.get(name, 1.0)
    if factor < 1:
        ap.error("--timeout-factor must be at least 1")
    try:
        built_image = harness.vm.find_image(kdir)
    except harness.vm.VMError as e:
        print(f"soak: {e} (make soak KERNEL={a.kernel})", file=sys.stderr)
        return 2
    built = {"image_built": time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime(Path(built_image).stat().st_mtime))}
    if packaged:
        built["package"] = deb.name
    seconds, snapshots, progs = soak_programs(a.minutes, packaged)
    for p in progs:
        p.timeout = int(p.timeout * factor)
    for p in progs:
        p.retries = 0
    missing = programs.missing(progs)
    if missing:
        print(f"soak: not built: {', '.join(missing)}: run 'make soak'", file=sys.stderr)
        return 2
    if packaged:
        # Debian's defaults (THP always, MGLRU, NUMA balancing), and the
        # walkers acting on every program's memory: KSM merging it, DAMON
        # paging it out, MGLRU aging and proactive reclaim (pressure).
        walkers = package.GUEST / "walkers.sh"
        progs = ([package.cfs_bandwidth_on(), harness.Program("walkers_on", 60, f"{walkers} on")]
                 + [package.under_ksm(p) for p in progs]
                 + [harness.Program("walkers_check", 60, f"{walkers} check")])
    out = BUILD / "results/soak"
    print(f"soak: {name} kernel, {seconds} s per stress program, "
          f"{snapshots} Redis snapshots per configuration, swap on {a.swap}; "
          f"results in {out}", flush=True)
    start = time.time()
    stamp = packages_stamp()
    # Single-threaded TCG: see vm.run's tcg_single.
    extra = {"keep_thp": True, "root_fs": "virtiofs"} if packaged else {}
    stress_names = {p.name for p in progs if fork_stress.is_program(p)}
    run = harness.run_suite(kdir, progs, out, memory=a.memory, cpus=a.cpus,
                            numa_nodes=2, swap=a.swap, boot_timeout=int(180 * factor),
                            tcg_single=tcg_single, echo=harness.printer("soak: "),
                            heartbeat=lambda p: heartbeat_line(p, out, time.time() - start,
                                                               a.minutes, stress_names),
                            heartbeat_every=a.heartbeat, **extra)
    finished = time.time()
    host_note = host_changed_note(stamp, packages_stamp())
    runs = fork_stress.runs(run, progs)
    config = skips.config(name)
    problems = fork_stress.judge(run, progs, runs, config)
    fork_stress.print_judgement("soak: ", run, progs, problems, config)
    for s in runs:
        if s["forks"] is None:
            print(f"soak: {s['program']} (run {s['run']}) printed no counter line "
                  f"('fork_stress: forks N, deferred D (P%), ...'): counters recorded as null")
    failed = sum(bool(v) for v in problems.values())
    reports = run.vm.reports or []
    if reports:
        print("soak: kernel reports in the console log:\n" + "\n\n".join(reports))
    swaps = out / "swaps"
    if swaps.exists():
        print("soak: guest swap:\n    " + swaps.read_text().strip().replace("\n", "\n    "))
    record = soak_record.make_record(
        kernel_name=name, kernel_dir=kdir, run=run, progs=progs, built=built,
        problems=problems, runs=runs, started=start, finished=finished,
        machine_info=results.machine(a.cpus, a.memory, 2, a.swap, tcg_single=tcg_single),
        argv=argv, args={**vars(a), "timeout_factor": factor, "tcg_single": tcg_single,
                         "seconds_per_program": seconds, "redis_snapshots": snapshots},
        image=image, config=config)
    record["host_packages_changed"] = host_note is not None
    if host_note:
        print(f"soak: warning: {host_note}")
    path = soak_record.write_record(record, Path(a.record_dir), name)
    print(f"soak: {len(progs) - failed} of {len(progs)} programs passed in "
          f"{(finished - start) / 60:.1f} min ({run.kernelrelease}); "
          f"forks {record['forks']}, deferred {record['forks_deferred']}, "
          f"children checked {record['children_checked']}, cases skipped "
          f"{record['skipped']} ({record['skipped_unexplained']} with no reason); record {path}")
    return 1 if failed or reports else 0


if __name__ == "__main__":
    sys.exit(entry.run(main, "soak"))
