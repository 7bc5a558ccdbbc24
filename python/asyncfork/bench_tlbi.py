# SPDX-License-Identifier: GPL-2.0
"""make bench-tlbi ARCH=arm64: the TLB invalidations of one fork, counted.

Boots the arm64 kernel once under QEMU with the plugin
bench/qemu/tlbi-count.c, which counts every TLBI instruction the guest
executes, by kind, between two marker hints.  bench/forkbench.c --touch
--mark runs between them: fork() of a --size-mb heap of 4 KiB pages, the
parent writing one word in each 2 MiB of it (so every PTE table below a
mark is copied and unmarked once, by the child's copier or by the parent's
write fault), the child checking its snapshot and exiting, the parent
reaping it.  The default fork and Async-fork run side by side, on each
CPU model of --cpus (QEMU's "max" has FEAT_TLBIRANGE; "neoverse-n1" has
not, as Neoverse N1, Graviton2 and Altra).  Reported per fork: the median
count of each kind, and Async-fork's extra invalidations per PTE table.
"""

import re
import statistics
import sys
import time
from pathlib import Path

from asyncfork import entry, results, vm
from asyncfork.paths import BUILD, RESULTS, arch_dir

CPUS = 2
PLUGIN = BUILD / "tools" / "tlbi-count.so"
INTERVAL = re.compile(r"^interval (\d+):(.*)$")


def parse_intervals(text: str) -> list[dict[str, int]]:
    """The plugin's lines, in order: one {kind: count} per interval."""
    out = []
    for line in text.splitlines():
        m = INTERVAL.match(line)
        if not m:
            continue
        counts = {}
        for item in m.group(2).split():
            kind, _, n = item.partition("=")
            counts[kind] = int(n)
        out.append(counts)
    return out


def medians(intervals: list[dict[str, int]]) -> dict[str, float]:
    kinds = sorted({k for i in intervals for k in i})
    return {k: statistics.median(i.get(k, 0) for i in intervals) for k in kinds}


def summarize(intervals: list[dict[str, int]], cpus: list[str], repeat: int,
              tables: int) -> dict:
    """Intervals in run order (per CPU model: the default fork's --repeat,
    then Async-fork's) -> per CPU model and mode, the medians, and
    Async-fork's extra count of each kind per PTE table."""
    if len(intervals) != 2 * repeat * len(cpus):
        raise ValueError(f"{len(intervals)} intervals, expected {2 * repeat * len(cpus)}")
    out = {}
    for n, cpu in enumerate(cpus):
        base = 2 * repeat * n
        default = medians(intervals[base:base + repeat])
        async_ = medians(intervals[base + repeat:base + 2 * repeat])
        kinds = sorted(set(default) | set(async_))
        out[cpu] = {"default": default, "async": async_,
                    "extra_per_table": {k: round((async_.get(k, 0) - default.get(k, 0)) /
                                                 tables, 3) for k in kinds}}
    return out


LEGEND = ("Median count of each TLBI kind per fork, the default fork / Async-fork, and "
          "Async-fork's extra per PTE table; the guest's other TLBIs in the interval "
          "count too (a few).")


def table(summary: dict, size_mb: int, tables: int) -> str:
    lines = [f"Per fork of {size_mb} MiB ({tables} PTE tables).", "",
             "| CPU model | TLBI | default fork | Async-fork | extra per table |",
             "| --- | --- | --- | --- | --- |"]
    for cpu, s in summary.items():
        for k in sorted(s["extra_per_table"]):
            lines.append(f"| {cpu} | {k} | {s['default'].get(k, 0):g} | "
                         f"{s['async'].get(k, 0):g} | {s['extra_per_table'][k]:+g} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    argv_ = sys.argv[1:] if argv is None else argv
    started = time.time()
    ap = entry.parser(__doc__)
    ap.add_argument("--kernel", default=str(arch_dir("lean")),
                    help="an arm64 kernel build folder (default: the lean kernel's)")
    ap.add_argument("--size-mb", type=int, default=256,
                    help="the forking process's heap (default 256: 128 PTE tables)")
    ap.add_argument("--repeat", type=int, default=3, help="forks of each mode (default 3)")
    ap.add_argument("--cpus", default="max,neoverse-n1",
                    help="QEMU CPU models, comma-separated (default max,neoverse-n1)")
    ap.add_argument("--out", default=str(RESULTS / "tlbi"), help="the run's files")
    results.add_record_dir(ap)
    a = ap.parse_args(argv)
    if vm.ARCH != "arm64":
        print("bench-tlbi: arm64 only (make bench-tlbi ARCH=arm64): the counts come from "
              "QEMU emulating an arm64 guest", file=sys.stderr)
        return 2
    if a.size_mb < 2 or a.size_mb % 2 or a.repeat < 1:
        print("bench-tlbi: --size-mb must be an even number of MiB, at least 2, and "
              "--repeat at least 1", file=sys.stderr)
        return 2
    cpus = [c for c in a.cpus.split(",") if c]
    if not cpus or any(not re.fullmatch(r"[a-z0-9-]+", c) for c in cpus):
        print(f"bench-tlbi: --cpus must name QEMU CPU models like max,neoverse-n1, "
              f"not '{a.cpus}'", file=sys.stderr)
        return 2
    if not PLUGIN.is_file():
        print(f"bench-tlbi: no {PLUGIN}: run make bench-tlbi ARCH=arm64", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    bench = arch_dir("bench") / "forkbench"
    tables = a.size_mb // 2
    memory = f"{max(1024, a.size_mb * 2 + 768)}M"
    intervals = []
    for cpu in cpus:
        counts = out / f"tlbi-{cpu}.txt"
        counts.unlink(missing_ok=True)
        runs = [f"{bench} --size-mb {a.size_mb} --touch --mark --repeat {a.repeat}{x}"
                f" >> {out}/forkbench.jsonl" for x in ("", " --async")]
        print(f"bench-tlbi: booting {a.kernel} on QEMU's {cpu} CPU, {a.size_mb} MiB, "
              f"{a.repeat} forks each way", flush=True)
        try:
            r = vm.run(a.kernel, "sysctl -qw vm.async_fork=1 && " + " && ".join(runs),
                       memory=memory, cpus=CPUS, timeout=1800, rwdirs=[out],
                       log_path=out / f"console-{cpu}.log",
                       qemu_opts=[f"-cpu {cpu}", f"-plugin {PLUGIN},out={counts}"])
        except vm.VMError as e:
            print(f"bench-tlbi: {e}", file=sys.stderr)
            return 2
        if not r.ok:
            print("bench-tlbi: " + r.describe(), file=sys.stderr)
            return 1
        intervals += parse_intervals(counts.read_text() if counts.exists() else "")
    try:
        summary = summarize(intervals, cpus, a.repeat, tables)
    except ValueError as e:
        print(f"bench-tlbi: the plugin's counts do not match the forks: {e}", file=sys.stderr)
        return 1
    kernel = results.kernel(Path(a.kernel), async_fork="1 (forkbench --async: prctl)")
    record = {**results.metadata("bench-tlbi", kernels=[kernel],
                                 machine_info=results.machine(CPUS, memory),
                                 argv=argv_, args=vars(a), started=started),
              "seconds": round(time.time() - started, 1), "size_mb": a.size_mb,
              "pte_tables": tables, "repeat": a.repeat, "per_fork": summary,
              "intervals": intervals}
    path = results.write(record, Path(a.record_dir or out.parent), "bench-tlbi-arm64")
    print(table(summary, a.size_mb, tables))
    print(f"bench-tlbi: record {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
