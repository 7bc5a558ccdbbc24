# SPDX-License-Identifier: GPL-2.0
"""Benchmark: how long fork() stops a process with a large heap, default
fork and Async-fork side by side in one boot.

Boots the lean guest kernel and runs forkbench for a range of resident
sizes, 4 KiB pages and THP: the time the parent spends in fork() and the
time until the child runs (with Async-fork, until its page-table copy is
done), for the default fork and for Async-fork with each number of copy
threads (--threads).  The guest is sized from the host's free memory
(--memory overrides).  Natively (the running kernel has Async-fork, or
NATIVE=1 / --native; NATIVE=0 / --vm forces the VM): the same runs on this
machine, with vm.async_fork, vm.async_fork_copy_threads and THP's
"enabled" put back when they end, Ctrl-C included.  Results go to
BUILD/results/fork/.
"""

import argparse
import json
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

from asyncfork import demo
from asyncfork import entry, native, vm
from asyncfork.paths import BUILD, RESULTS

GUEST_OWN_MB = 768     # what the guest needs besides the measured heap


def default_memory(largest_mb: int) -> str:
    """The largest heap and the guest's own needs, within 60% of the
    host's available memory, at least 2 GiB."""
    have = int(vm.host_available() * 0.6) >> 20
    return f"{max(2048, min(largest_mb + GUEST_OWN_MB + 256, have))}M"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    native.add_arguments(ap)
    ap.add_argument("--kernel", default=str(BUILD / "lean"), help="VM only")
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
    ap.add_argument("--out", default=str(RESULTS / "fork"))
    a = ap.parse_args(argv)
    if a.report:
        if not (Path(a.out) / "meta.json").exists():
            print(f"fork_bench: no results in {a.out}", file=sys.stderr)
            return 2
        return report(Path(a.out))
    on_machine = native.decide(a, "fork_bench")
    if on_machine is None:
        return 2

    try:
        sizes = [int(s) for s in a.sizes.split(",")]
        if not sizes or min(sizes) < 1:
            raise ValueError
    except ValueError:
        print(f"fork_bench: --sizes must be MiB numbers like 256,1024, not '{a.sizes}'",
              file=sys.stderr)
        return 2
    if on_machine:
        memory = f"{native.machine()['memory_mb']}M"
        have = native.available_mb()
        too_big = [s for s in sizes if s > have - GUEST_OWN_MB]
        if too_big:
            print(f"fork_bench: sizes {too_big} MiB do not fit this machine's {have} MiB of "
                  f"available memory (less {GUEST_OWN_MB} MiB): pass --sizes smaller",
                  file=sys.stderr)
            return 2
    else:
        memory = a.memory or default_memory(max(sizes))
        try:
            guest_mb = vm.parse_size(memory) >> 20
        except vm.VMError as e:
            print(f"fork_bench: {e}", file=sys.stderr)
            return 2
        too_big = [s for s in sizes if s > guest_mb - GUEST_OWN_MB]
        if too_big:
            print(f"fork_bench: sizes {too_big} MiB do not fit a {memory} guest (it needs "
                  f"{GUEST_OWN_MB} MiB for itself): pass --memory larger or --sizes smaller",
                  file=sys.stderr)
            return 2
    try:
        threads = [int(t) for t in a.threads.split(",")]
    except ValueError:
        threads = []
    if not threads or any(not 1 <= t <= 32 for t in threads):
        print(f"fork_bench: --threads must be numbers from 1 to 32 like 1,2, not '{a.threads}'",
              file=sys.stderr)
        return 2
    if a.repeat < 1:
        print("fork_bench: --repeat must be at least 1", file=sys.stderr)
        return 2

    bench = BUILD / "bench/forkbench"
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
        print(f"fork_bench: on this machine ({native.machine()['kernel']}); sizes {sizes} MiB",
              flush=True)
        if not run_native(runs, out / "forkbench.jsonl"):
            return 1
        m = native.machine()
        meta = {"mode": "native", "kernelrelease": m["kernel"], "machine": m, "kvm": None}
    else:
        cmds = [f"sysctl -qw vm.async_fork_copy_threads={t} && {shlex.join(argv)}"
                for t, argv in runs]
        script = " && ".join(f"echo '# {c}' >&2 && {c} >> {out}/forkbench.jsonl"
                             for c in cmds)
        print(f"fork_bench: booting {a.kernel} ({vm.kernel_release(Path(a.kernel))}) with "
              f"{memory}, {'KVM' if vm.kvm_usable() else 'TCG emulation'}; sizes {sizes} MiB",
              flush=True)
        try:
            r = vm.run(a.kernel, "echo always > /sys/kernel/mm/transparent_hugepage/enabled && "
                       f"sysctl -qw vm.async_fork=1 && {script}",
                       memory=memory, cpus=2,
                       # Under TCG: about 10 s per GiB to touch, 5 per fork and check.
                       timeout=600 + 2 * (3 + len(threads)) * sum(sizes) / 1024 *
                       (10 + 5 * a.repeat),
                       rwdirs=[out], log_path=out / "console.log")
        except vm.VMError as e:
            print(f"fork_bench: {e}", file=sys.stderr)
            return 2
        if not r.ok:
            print("fork_bench: " + r.describe(), file=sys.stderr)
            return 1
        meta = {"mode": "vm", "kernelrelease": vm.kernel_release(Path(a.kernel)),
                "guest_memory": memory, "guest_cpus": 2, "kvm": vm.kvm_usable()}
    meta.update(project=vm.git_describe(), sizes_mb=sizes, repeat=a.repeat,
                copy_threads=threads)
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    return report(out)


def run_native(runs: list, jsonl: Path, root: Path = Path("/")) -> bool:
    """forkbench on this machine: THP always, vm.async_fork=1 and each run's
    vm.async_fork_copy_threads, all put back when the runs end, however
    they end (Ctrl-C, SIGTERM, SIGHUP: the exception goes on afterwards)."""
    settings = native.Settings(root)
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
                    print(f"fork_bench: {argv[0]} failed", file=sys.stderr)
                    return False
        return True
    finally:
        with native.held():
            what = settings.describe()
            errors = settings.restore()
            native.put_back_signals(old)
        for e in errors:
            print(f"fork_bench: error: {e}", file=sys.stderr)
        print(f"fork_bench: settings put back: {what}" if not errors else
              "fork_bench: settings NOT all put back: see the errors above", flush=True)


def platform(meta: dict) -> str:
    if meta.get("mode") == "native":
        return "native"
    return "KVM" if meta["kvm"] else "TCG"


def copy_threads_plot(plt, out: Path, meta: dict, sizes, threads, med) -> None:
    """copy-threads.png: the child's whole copy against the number of copiers,
    one line per size, with the default fork of that size for reference."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for s, color in zip(sizes, colors * 2):
        name = f"{s // 1024} GiB" if s >= 1024 else f"{s} MiB"
        ax.plot(threads, [med(s, False, True, "child_us", t) for t in threads], "o-",
                color=color, label=name)
        ax.axhline(med(s, False, False, "fork_us"), color=color, ls=":", lw=1)
    ax.set_xticks(threads)
    ax.set_yscale("log")
    ax.set_xlabel("vm.async_fork_copy_threads (the child and its helper threads)")
    ax.set_ylabel("fork() call to the child's first instruction, ms (log)")
    ax.set_title(f"Async-fork: the child's copy against copy threads, 4 KiB pages\n"
                 f"dotted: the default fork of the same size ({meta['kernelrelease']}, "
                 f"{platform(meta)})", fontsize=10)
    ax.legend(fontsize=8, title="resident", title_fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "copy-threads.png", dpi=120)
    plt.close(fig)
    print(f"plot: {out}/copy-threads.png")


def report(out: Path) -> int:
    """Print the tables of a run and plot it (fork-vs-size.png)."""
    meta = json.loads((out / "meta.json").read_text())
    rows = [json.loads(line) for line in (out / "forkbench.jsonl").read_text().splitlines()]
    sizes, threads = meta["sizes_mb"], meta["copy_threads"]
    print(f"\nfork() of a process with a resident anonymous heap, default fork and "
          f"Async-fork {'natively' if meta.get('mode') == 'native' else 'in one boot'},"
          f"\nkernel {meta['kernelrelease']}, "
          f"median of {meta['repeat']}; 'child runs': fork() call to the child's first instruction")
    print(f"{'resident':>10} {'pages':>6} {'fork() ms':>10} {'async ms':>9} {'ratio':>7} "
          f"{'child runs ms':>14} {'async':>9}")

    def med(s, thp, af, key, t=threads[0]):
        sel = [x[key] for x in rows if x["size_mb"] == s and x["thp"] == thp
               and x.get("async", False) == af and (not af or x.get("copy_threads") == t)]
        return statistics.median(sel) / 1e3

    for s in sizes:
        for thp in (False, True):
            f, fa = med(s, thp, False, "fork_us"), med(s, thp, True, "fork_us")
            c, ca = med(s, thp, False, "child_us"), med(s, thp, True, "child_us")
            print(f"{s:>7} MiB {'THP' if thp else '4K':>6} {f:>10.2f} {fa:>9.3f} "
                  f"{f / fa:>6.0f}x {c:>14.2f} {ca:>9.2f}")
    if len(threads) > 1:
        print("\nAsync-fork, 4 KiB pages: fork() call to the child's first instruction "
              "(its whole copy), ms, by vm.async_fork_copy_threads")
        print(f"{'resident':>10} " + " ".join(f"{t:>8}" for t in threads))
        for s in sizes:
            print(f"{s:>7} MiB " + " ".join(f"{med(s, False, True, 'child_us', t):>8.2f}"
                                            for t in threads))
    plt = demo.pyplot()
    if plt:
        fig, ax = plt.subplots(figsize=(7, 5))
        for thp, style in ((False, "-"), (True, ":")):
            pages = "THP" if thp else "4 KiB"
            ax.plot(sizes, [med(s, thp, False, "fork_us") for s in sizes], "o" + style,
                    color="tab:red", label=f"default fork, {pages}")
            ax.plot(sizes, [med(s, thp, True, "fork_us") for s in sizes], "o" + style,
                    color="tab:blue", label=f"Async-fork: fork() in the parent, {pages}")
        ax.plot(sizes, [med(s, False, True, "child_us") for s in sizes], "s--",
                color="tab:green", label="Async-fork: until the child's copy is done, 4 KiB")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sizes, [f"{s // 1024} GiB" if s >= 1024 else f"{s} MiB" for s in sizes])
        ax.set_xlabel("resident anonymous memory")
        ax.set_ylabel("ms (log)")
        ax.set_title(f"fork() against memory size ({meta['kernelrelease']}, "
                     f"{platform(meta)})", fontsize=10)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=2)
        ax.grid(True, which="both", alpha=0.3)
        fig.tight_layout()
        fig.savefig(out / "fork-vs-size.png", dpi=120)
        plt.close(fig)
        print(f"\nplot: {out}/fork-vs-size.png")
        if len(threads) > 1:
            copy_threads_plot(plt, out, meta, sizes, threads, med)
    print(f"raw results: {out}/forkbench.jsonl (kernel and project revision in meta.json)")
    if meta.get("mode", "vm") == "vm" and not meta["kvm"]:
        print("note: this guest runs under TCG emulation; compare ratios within one run, "
              "not absolute times.")
    return 0

cli = entry.command(main, "fork_bench")

if __name__ == "__main__":
    cli()
