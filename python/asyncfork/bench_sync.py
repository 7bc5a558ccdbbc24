# SPDX-License-Identifier: GPL-2.0
"""make bench-sync: what a parent's writes wait for right after fork().

Boots each kernel of --kernels (alternating, in a rotating order, --boots
times) and runs bench/forkbench.c --touch in it, default fork and
Async-fork side by side: right after fork() the parent writes one word in
each 2 MiB of its heap, in a shuffled order, and times every write, while
--hogs busy loops compete with the child's copy for the CPUs.  With the
default fork a write costs a copy-on-write fault; with Async-fork it may
also wait for the PTE table's copy (its own, or a copier's holding the
table's lock).  Reports per kernel and mode the median fork() time, the
p50/p99/max of those writes and how many took over 1 ms: the measure of
"no request waits more than 1 ms on Async-fork's own work" with no Redis
in between, and of a change to the copy's locking, before and after in
one run (--kernels before=build/lean-before,after=build/lean).
"""

import json
import statistics
import sys
import time
from pathlib import Path

from asyncfork import entry, results, vm
from asyncfork.paths import RESULTS, arch_dir

CPUS = 2


def parse_kernels(spec: str) -> list[tuple[str, Path]]:
    """"name=path,..." or "path,..." (named after the folder)."""
    out = []
    for item in spec.split(","):
        name, _, path = item.rpartition("=")
        path = Path(path)
        out.append((name or path.name, path))
    if not out or len({n for n, _ in out}) != len(out):
        raise ValueError(spec)
    return out


def summarize(rows: list[dict]) -> dict:
    """{mode: {...}} over the forkbench lines of one kernel."""
    out = {}
    for mode in ("default", "async"):
        rs = [r for r in rows if r["async"] == (mode == "async")]
        if not rs:
            continue
        out[mode] = {
            "forks": len(rs),
            "fork_ms_median": statistics.median(r["fork_us"] for r in rs) / 1e3,
            "touch_p50_us_median": statistics.median(r["touch_p50_us"] for r in rs),
            "touch_p99_us_median": statistics.median(r["touch_p99_us"] for r in rs),
            "touch_max_us": max(r["touch_max_us"] for r in rs),
            "touches": sum(r["touch_n"] for r in rs),
            "touches_over_1ms": sum(r["touch_over_1ms"] for r in rs),
        }
    return out


def table(summary: dict) -> str:
    lines = ["| kernel | mode | forks | fork() ms (median) | write p50 us | write p99 us "
             "| write max us | writes > 1 ms |",
             "|---|---|---|---|---|---|---|---|"]
    for k, modes in summary.items():
        for m, s in modes.items():
            lines.append(f"| {k} | {m} | {s['forks']} | {s['fork_ms_median']:.2f} | "
                         f"{s['touch_p50_us_median']:.1f} | {s['touch_p99_us_median']:.1f} | "
                         f"{s['touch_max_us']:.1f} | {s['touches_over_1ms']} of "
                         f"{s['touches']} |")
    return "\n".join(lines)


LEGEND = ("write p50/p99: median over the forks of each fork's percentile; max: the slowest "
          "write of all forks; one write per 2 MiB of the heap, right after fork()")


def main(argv=None) -> int:
    argv_ = sys.argv[1:] if argv is None else argv
    ap = entry.parser(__doc__)
    ap.add_argument("--kernels", default=str(arch_dir("lean")),
                    help="NAME=PATH,... kernel build folders (default: the lean kernel)")
    ap.add_argument("--size-mb", type=int, default=1024, help="heap, MiB (default 1024)")
    ap.add_argument("--hogs", type=int, default=2,
                    help="busy loops competing for the CPUs (default 2)")
    ap.add_argument("--repeat", type=int, default=10, help="forks per mode and boot")
    ap.add_argument("--boots", type=int, default=2, help="boots of each kernel (default 2)")
    ap.add_argument("--out", default=str(RESULTS / "sync"), help="the run's files")
    results.add_record_dir(ap)
    a = ap.parse_args(argv)
    try:
        kernels = parse_kernels(a.kernels)
    except ValueError:
        print(f"bench-sync: --kernels must be NAME=PATH,... with distinct names, "
              f"not '{a.kernels}'", file=sys.stderr)
        return 2
    if a.size_mb < 2 or a.repeat < 1 or a.boots < 1 or not 0 <= a.hogs <= 64:
        print("bench-sync: --size-mb at least 2, --repeat and --boots at least 1, "
              "--hogs 0 to 64", file=sys.stderr)
        return 2
    for name, path in kernels:
        try:
            vm.find_image(path)
        except vm.VMError as e:
            print(f"bench-sync: kernel '{name}': {e}", file=sys.stderr)
            return 2
    bench = arch_dir("bench") / "forkbench"
    if not bench.exists():
        print(f"bench-sync: no {bench}: run make bench-programs", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    memory = f"{a.size_mb + 1024}M"
    cmd = f"{bench} --size-mb {a.size_mb} --repeat {a.repeat} --touch --hogs {a.hogs}"
    guest = (f"sysctl -qw vm.async_fork=1 && {cmd} > {out}/rows.jsonl && "
             f"{cmd} --async >> {out}/rows.jsonl")
    rows = {name: [] for name, _ in kernels}
    t0 = time.time()
    for b in range(a.boots):
        for name, path in kernels[b % len(kernels):] + kernels[:b % len(kernels)]:
            print(f"bench-sync: boot {b + 1}/{a.boots}: {name} ({vm.kernel_release(path)})",
                  flush=True)
            (out / "rows.jsonl").unlink(missing_ok=True)
            r = vm.run(path, guest, memory=memory, cpus=CPUS, rwdirs=[out],
                       timeout=900 + a.repeat * a.size_mb // 4,
                       log_path=out / f"console-{name}-{b}.log")
            if not r.ok:
                print(f"bench-sync: {name}: " + r.describe(), file=sys.stderr)
                return 1
            got = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()
                   if line.startswith("{")]
            if len(got) != 2 * a.repeat:
                print(f"bench-sync: {name}: {len(got)} of {2 * a.repeat} forks reported",
                      file=sys.stderr)
                return 1
            rows[name].extend(dict(r, boot=b) for r in got)
    summary = {name: summarize(rs) for name, rs in rows.items()}
    record = {**results.metadata(
        "bench-sync", kernels=[results.kernel(p, label=n, async_fork="1 (forkbench --async: prctl)")
                               for n, p in kernels],
        machine_info=results.machine(CPUS, memory), argv=argv_, args=vars(a), started=t0),
        "seconds": round(time.time() - t0, 1), "rows": rows, "summary": summary}
    md = table(summary) + "\n\n" + LEGEND
    (out / "sync.md").write_text(md + "\n")
    print(md)
    path = results.write(record, Path(a.record_dir or out.parent), "bench-sync")
    print(f"bench-sync: record {path}")
    return 0



if __name__ == "__main__":
    sys.exit(entry.run(main, "bench-sync"))
