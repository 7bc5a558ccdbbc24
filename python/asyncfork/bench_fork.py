# SPDX-License-Identifier: GPL-2.0
"""Benchmark: how long fork() stops a process with a large heap, default
fork and Async-fork side by side in one boot.

Boots the lean guest kernel and runs forkbench for a range of resident
sizes, 4 KiB pages and THP: the time the parent spends in fork() and the
time until the child runs (with Async-fork, until its page-table copy is
done), for the default fork and for Async-fork with each number of copy
threads (--threads).  The guest is sized from the host's free memory
(--memory overrides).  Natively, only when asked (NATIVE=1 / --native; a
kernel with Async-fork): the same runs on this machine, the settings they
change (vm.async_fork, vm.async_fork_copy_threads and THP's "enabled")
printed with their old and new values first, and put back when they end,
Ctrl-C included.  Results go to
BUILD/results/fork/.
"""

import json
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from asyncfork import entry, native, plots, results, vm
from asyncfork.paths import RESULTS, arch_dir

GUEST_OWN_MB = 768     # what the guest needs besides the measured heap
GUEST_CPUS = 2


def main(argv=None) -> int:
    argv_ = sys.argv[1:] if argv is None else argv
    started = time.time()
    ap = entry.parser(__doc__)
    native.add_arguments(ap)
    ap.add_argument("--kernel", default=str(arch_dir("lean")), help="VM only")
    ap.add_argument("--report", action="store_true",
                    help="print and plot the results in --out again, without a run")
    ap.add_argument("--memory", default=None,
                    help="guest memory (default: from host free memory; VM only)")
    ap.add_argument("--sizes", default="512,1024,2048,4096,8192",
                    help="resident sizes in MiB, comma-separated (default 512,...,8192)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", default="1,2,4",
                    help="vm.async_fork_copy_threads values to measure Async-fork with, "
                         "4 KiB pages (default 1,2,4; the main table and THP use the first)")
    ap.add_argument("--out", default=str(RESULTS / "fork"), help="the run's files")
    results.add_record_dir(ap)
    a = ap.parse_args(argv)
    if a.report:
        if not (Path(a.out) / "meta.json").exists():
            print(f"bench-fork: no results in {a.out}", file=sys.stderr)
            return 2
        return report(Path(a.out), Path(a.record_dir) if a.record_dir else None)
    on_machine = native.decide(a, "bench-fork")
    if on_machine is None:
        return 2

    try:
        sizes = [int(s) for s in a.sizes.split(",")]
        if not sizes or min(sizes) < 1:
            raise ValueError
    except ValueError:
        print(f"bench-fork: --sizes must be MiB numbers like 256,1024, not '{a.sizes}'",
              file=sys.stderr)
        return 2
    try:
        memory, have = vm.sizing(max(sizes) + GUEST_OWN_MB, on_machine=on_machine,
                                 memory=a.memory, slack_mb=256)
    except vm.VMError as e:
        print(f"bench-fork: {e}", file=sys.stderr)
        return 2
    too_big = [s for s in sizes if s > have - GUEST_OWN_MB]
    if too_big:
        print(f"bench-fork: sizes {too_big} MiB do not fit {vm.fit_place(on_machine, have)} "
              f"(it needs {GUEST_OWN_MB} MiB for itself): pass --sizes smaller"
              f"{'' if on_machine else ' or --memory larger'}", file=sys.stderr)
        return 2
    try:
        threads = [int(t) for t in a.threads.split(",")]
    except ValueError:
        threads = []
    if not threads or any(not 1 <= t <= 32 for t in threads):
        print(f"bench-fork: --threads must be numbers from 1 to 32 like 1,2, not '{a.threads}'",
              file=sys.stderr)
        return 2
    if a.repeat < 1:
        print("bench-fork: --repeat must be at least 1", file=sys.stderr)
        return 2

    bench = arch_dir("bench") / "forkbench"
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    # Each size: the default fork, then Async-fork with each thread count
    # (THP: with the first only, its PMD-mapped pages are copied at fork).
    runs = [(t or 1, [str(bench), "--size-mb", str(s)] + (["--thp"] if thp else []) +
             (["--async"] if t else []) + ["--repeat", str(a.repeat)])
            for s in sizes for thp in (False, True)
            for t in [None] + (threads[:1] if thp else threads)]
    (out / "forkbench.jsonl").unlink(missing_ok=True)
    if on_machine:
        print(f"bench-fork: on this machine ({native.machine()['kernel']}); sizes {sizes} MiB",
              flush=True)
        if not run_native(runs, out / "forkbench.jsonl"):
            return 1
    else:
        cmds = [f"sysctl -qw vm.async_fork_copy_threads={t} && {shlex.join(argv)}"
                for t, argv in runs]
        script = " && ".join(f"echo '# {c}' >&2 && {c} >> {out}/forkbench.jsonl"
                             for c in cmds)
        print(f"bench-fork: booting {a.kernel} ({vm.kernel_release(Path(a.kernel))}) with "
              f"{memory}, {'KVM' if vm.kvm_usable() else 'TCG emulation'}; sizes {sizes} MiB",
              flush=True)
        try:
            r = vm.run(a.kernel, "echo always > /sys/kernel/mm/transparent_hugepage/enabled && "
                       f"sysctl -qw vm.async_fork=1 && {script}",
                       memory=memory, cpus=GUEST_CPUS,
                       # Under TCG: about 10 s per GiB to touch, 5 per fork and check.
                       timeout=600 + 2 * (3 + len(threads)) * sum(sizes) / 1024 *
                       (10 + 5 * a.repeat),
                       rwdirs=[out], log_path=out / "console.log")
        except vm.VMError as e:
            print(f"bench-fork: {e}", file=sys.stderr)
            return 2
        if not r.ok:
            print("bench-fork: " + r.describe(), file=sys.stderr)
            return 1
    kernel = results.kernel(None if on_machine else Path(a.kernel),
                            async_fork="1 (the default fork: forkbench without --async; "
                            "Async-fork: with --async, prctl)")
    meta = {**results.metadata("bench-fork", kernels=[kernel],
                               machine_info=results.machine() if on_machine else
                               results.machine(GUEST_CPUS, memory),
                               argv=argv_, args=vars(a), started=started),
            "seconds": round(time.time() - started, 1),
            "sizes_mb": sizes, "repeat": a.repeat, "copy_threads": threads}
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    return report(out, Path(a.record_dir or out.parent))


def run_native(runs: list, jsonl: Path, root: Path = Path("/")) -> bool:
    """forkbench on this machine: THP always, vm.async_fork=1 and each run's
    vm.async_fork_copy_threads, printed before the first change, all put back when the runs end, however
    they end (Ctrl-C, SIGTERM, SIGHUP: the exception goes on afterwards)."""
    settings = native.Settings(root, plan_first=True)
    plan = native.Plan(settings)
    plan.setting("/sys/kernel/mm/transparent_hugepage/enabled", "always")
    plan.setting("/proc/sys/vm/async_fork", "1")
    plan.setting("/proc/sys/vm/async_fork_copy_threads",
                 *dict.fromkeys(str(t) for t, _ in runs))
    settings.announce("bench-fork", plan)
    old = native.stop_on_signals()
    try:
        settings.write(settings.path("/sys/kernel/mm/transparent_hugepage/enabled"), "always")
        settings.write(settings.path("/proc/sys/vm/async_fork"), "1")
        threads = settings.path("/proc/sys/vm/async_fork_copy_threads")
        with open(jsonl, "a") as f:
            for t, argv in runs:
                settings.write(threads, str(t))
                print(f"# vm.async_fork_copy_threads={t} {shlex.join(argv)}", file=sys.stderr,
                      flush=True)
                if subprocess.run(argv, stdout=f, check=False).returncode:
                    print(f"bench-fork: {argv[0]} failed", file=sys.stderr)
                    return False
        return True
    finally:
        with native.held():
            what = settings.describe()
            errors = settings.restore()
            native.put_back_signals(old)
        for e in errors:
            print(f"bench-fork: error: {e}", file=sys.stderr)
        print(f"bench-fork: settings put back: {what}" if not errors else
              "bench-fork: settings NOT all put back: see the errors above", flush=True)


def medians(rows: list, meta: dict) -> list:
    """The median of the repeats of each (size, pages, fork, copy threads),
    ms: fork_ms, the parent in fork(); child_ms, from the fork() call to the
    child's first instruction (with Async-fork: its whole copy)."""
    out = []
    for s in meta["sizes_mb"]:
        for thp in (False, True):
            for af, t in [(False, None)] + [(True, t) for t in meta["copy_threads"]]:
                sel = [x for x in rows if x["size_mb"] == s and x["thp"] == thp
                       and x.get("async", False) == af
                       and (not af or x.get("copy_threads") == t)]
                if sel:
                    out.append({"size_mb": s, "thp": thp, "async": af, "copy_threads": t,
                                "fork_ms": statistics.median(x["fork_us"] for x in sel) / 1e3,
                                "child_ms": statistics.median(x["child_us"] for x in sel) / 1e3,
                                "n": len(sel)})
    return out


def report(out: Path, record_dir: Path | None = None) -> int:
    """Print the tables of a run, write its record (into record_dir, if
    given: asyncfork.results) and plot it (fork-vs-size.png, copy-threads.png)."""
    meta = json.loads((out / "meta.json").read_text())
    rows = [json.loads(line) for line in (out / "forkbench.jsonl").read_text().splitlines()]
    record = {**meta, "rows": rows, "medians": medians(rows, meta)}
    sizes, threads = record["sizes_mb"], record["copy_threads"]
    print(f"\nfork() of a process with a resident anonymous heap, default fork and "
          f"Async-fork {'natively' if record['where'] == 'native' else 'in one boot'},"
          f"\nkernel {record['kernel']}, median of {record['repeat']}; "
          f"'child runs': fork() call to the child's first instruction")
    print(f"{'resident':>10} {'pages':>6} {'fork() ms':>10} {'async ms':>9} {'ratio':>7} "
          f"{'child runs ms':>14} {'async':>9}")

    def med(s, thp, af, key, t=None):
        return plots.fork_median(record, s, thp, af, key, t)

    for s in sizes:
        for thp in (False, True):
            f, fa = med(s, thp, False, "fork_ms"), med(s, thp, True, "fork_ms")
            c, ca = med(s, thp, False, "child_ms"), med(s, thp, True, "child_ms")
            print(f"{s:>7} MiB {'THP' if thp else '4K':>6} {f:>10.2f} {fa:>9.3f} "
                  f"{f / fa:>6.0f}x {c:>14.2f} {ca:>9.2f}")
    if len(threads) > 1:
        print("\nAsync-fork, 4 KiB pages: fork() call to the child's first instruction "
              "(its whole copy), ms, by vm.async_fork_copy_threads")
        print(f"{'resident':>10} " + " ".join(f"{t:>8}" for t in threads))
        for s in sizes:
            print(f"{s:>7} MiB " + " ".join(f"{med(s, False, True, 'child_ms', t):>8.2f}"
                                            for t in threads))
    for png in (plots.fork_vs_size(out / "fork-vs-size.png", record),
                plots.fork_copy_threads(out / "copy-threads.png", record)):
        if png:
            print(f"plot: {png}")
    if record_dir:
        print(f"record: {results.write(record, record_dir, 'bench-fork')}")
    print(f"raw results: {out}/forkbench.jsonl")
    if record["where"] == "vm" and record["machine"]["accel"] != "kvm":
        print("note: this guest runs under TCG emulation; compare ratios within one run, "
              "not absolute times.")
    return 0



if __name__ == "__main__":
    sys.exit(entry.run(main, "bench-fork"))
