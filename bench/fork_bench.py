#!/usr/bin/env python3
"""Benchmark: how long fork() stops a process with a large heap, default
fork and Async-fork side by side in one boot.

Boots the lean guest kernel and runs forkbench for a range of resident
sizes, 4 KiB pages and THP: the time the parent spends in fork() and the
time until the child runs (with Async-fork, until its page-table copy is
done), for the default fork and for Async-fork with each number of copy
threads (--threads).  The guest is sized from the host's free memory
(--memory overrides).  Results go to build/results/fork/.
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

TOP = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(TOP / "scripts"))

import vm  # noqa: E402


def default_memory() -> str:
    """Half the host's available memory, at most 16 GiB, at least 2 GiB."""
    gib = max(2, min(16, (vm.host_available() >> 30) // 2))
    return f"{gib}G"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernel", default=str(TOP / "build/lean"))
    ap.add_argument("--memory", default=None, help="guest memory (default: from host free memory)")
    ap.add_argument("--sizes", default="256,512,1024,2048",
                    help="resident sizes in MiB, comma-separated (default 256,512,1024,2048)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", default="1,2",
                    help="vm.async_fork_copy_threads values to measure Async-fork with "
                         "(default 1,2; the main table uses the first)")
    ap.add_argument("--out", default=str(TOP / "build/results/fork"))
    a = ap.parse_args(argv)

    memory = a.memory or default_memory()
    try:
        sizes = [int(s) for s in a.sizes.split(",")]
        guest_mb = vm.parse_size(memory) >> 20
    except ValueError:
        print(f"fork_bench: --sizes must be MiB numbers like 256,1024, not '{a.sizes}'", file=sys.stderr)
        return 2
    except vm.VMError as e:
        print(f"fork_bench: {e}", file=sys.stderr)
        return 2
    too_big = [s for s in sizes if s > guest_mb - 768]
    if too_big:
        print(f"fork_bench: sizes {too_big} MiB do not fit a {memory} guest (it needs 768 MiB "
              f"for itself): pass --memory larger or --sizes smaller", file=sys.stderr)
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

    bench = TOP / "build/bench/forkbench"
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    # Each size: the default fork, then Async-fork with each thread count.
    cmds = [f"sysctl -qw vm.async_fork_copy_threads={t or 1} && "
            f"{bench} --size-mb {s} {'--thp ' if thp else ''}{'--async ' if t else ''}"
            f"--repeat {a.repeat}"
            for s in sizes for thp in (False, True) for t in [None] + threads]
    script = " && ".join(f"echo '# {c}' >&2 && {c} >> {out}/forkbench.jsonl" for c in cmds)
    (out / "forkbench.jsonl").unlink(missing_ok=True)
    print(f"fork_bench: booting {a.kernel} ({vm.kernel_release(Path(a.kernel))}) with {memory}, "
          f"{'KVM' if vm.kvm_usable() else 'TCG emulation'}; sizes {sizes} MiB", flush=True)
    try:
        r = vm.run(a.kernel, "echo always > /sys/kernel/mm/transparent_hugepage/enabled && "
                   f"sysctl -qw vm.async_fork=1 && {script}",
                   memory=memory, cpus=2,
                   timeout=300 + 60 * (1 + len(threads)) * sum(sizes) // 256,
                   rwdirs=[out], log_path=out / "console.log")
    except vm.VMError as e:
        print(f"fork_bench: {e}", file=sys.stderr)
        return 2
    if not r.ok:
        print("fork_bench: " + r.describe(), file=sys.stderr)
        return 1

    rows = [json.loads(l) for l in (out / "forkbench.jsonl").read_text().splitlines()]
    meta = {"kernelrelease": vm.kernel_release(Path(a.kernel)), "project": vm.git_describe(),
            "guest_memory": memory, "guest_cpus": 2, "kvm": vm.kvm_usable(),
            "sizes_mb": sizes, "repeat": a.repeat, "copy_threads": threads}
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"\nfork() of a process with a resident anonymous heap, default fork and "
          f"Async-fork in one boot,\nkernel {vm.kernel_release(Path(a.kernel))}, "
          f"median of {a.repeat}; 'child runs': fork() call to the child's first instruction")
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
    print(f"\nraw results: {out}/forkbench.jsonl (kernel and project revision in meta.json)")
    if not vm.kvm_usable():
        print("note: this guest runs under TCG emulation; compare ratios within one run, "
              "not absolute times.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
