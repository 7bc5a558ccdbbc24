# SPDX-License-Identifier: GPL-2.0
"""make bench-offcost: what the series costs when Async-fork is not used.

Boots three kernels built from one config (kernel/configs/lean.config) and
runs bench/offcost.c in each: the unpatched 6.12 tree, the series with
CONFIG_ASYNC_FORK=y and vm.async_fork=0, and the series with
CONFIG_ASYNC_FORK=n.  The boots alternate, in a rotating order (A B C,
B C A, C A B, ...), so that neither a slow phase of the host nor the
place in a round favours a kernel; each boot runs every test --runs
times.  Reports, per test and kernel, the median of all runs, the
spread (min to max, in % of the median, for reference: one slow run
inflates it) and the ratio of the median to the unpatched kernel's; and,
per patched kernel, the difference of its median from the unpatched
kernel's with a 95% bootstrap confidence interval (both kernels' runs
resampled RESAMPLES times, seeded: the same values give the same
interval), which one outlier cannot inflate.  An interval that holds 0 is
no difference this run can resolve.

Writes JSON (every value, the machine it ran on and the run's metadata)
and a markdown table.
"""

import random
import statistics
import sys
import time
from pathlib import Path

from asyncfork import entry, plots, results, vm
from asyncfork.paths import BUILD, RESULTS

KERNELS = (("unpatched", "unpatched/lean"),
           ("y, vm.async_fork=0", "lean"),
           ("n", "off"))
TESTS = ("fork_exit", "fork_1g", "write_fault", "mprotect", "mmap_munmap", "odirect",
         "madv_free")
MEMORY = "3G"
CPUS = 2
RESAMPLES = 10000
SEED = 1
LEVEL = 0.95

# In the guest: Async-fork off if the kernel has it, a loop device over a
# tmpfs file for the O_DIRECT reads, then the tests.
GUEST = """set -e
if [ -e /proc/sys/vm/async_fork ]; then sysctl -qw vm.async_fork=0; fi
echo "ASYNC_FORK_SYSCTL $(cat /proc/sys/vm/async_fork 2>/dev/null || echo absent)"
mkdir -p /tmp/oc && mount -t tmpfs tmpfs /tmp/oc
dd if=/dev/zero of=/tmp/oc/disk bs=1M count=64 status=none
dev=$(losetup --find --show /tmp/oc/disk)
{bench} --runs {runs} --blockdev "$dev"
losetup -d "$dev"
"""


def parse(console: str) -> dict:
    """{test: [values]} of the RESULT lines of one boot."""
    out = {}
    for line in console.splitlines():
        f = line.split()
        if len(f) == 5 and f[0] == "RESULT":
            out.setdefault(f[1], []).append(float(f[3]))
    return out


def median_diff_ci(base: list, other: list, resamples: int = RESAMPLES, seed: int = SEED,
                   level: float = LEVEL) -> tuple[float, float]:
    """The bootstrap confidence interval (percentile, at level) of
    median(other) - median(base), in % of median(base): each resample
    draws both lists' runs with replacement.  Seeded: the same runs give
    the same interval."""
    rng = random.Random(seed)
    scale = 100 / statistics.median(base)
    diffs = sorted((statistics.median(rng.choices(other, k=len(other))) -
                    statistics.median(rng.choices(base, k=len(base)))) * scale
                   for _ in range(resamples))
    tail = (1 - level) / 2
    return (diffs[int(tail * (resamples - 1))], diffs[int(round((1 - tail) * (resamples - 1)))])


def summarize(values: dict) -> dict:
    """{kernel: {test: {median, min, max, spread_pct, n}}}, ratios to the
    first kernel; for the others also diff_pct, the difference of the
    medians in % of the first kernel's, and ci_pct, its bootstrap
    interval (median_diff_ci())."""
    summary = {}
    base = next(iter(values))
    for k, tests in values.items():
        summary[k] = {}
        for t, v in tests.items():
            med = statistics.median(v)
            summary[k][t] = {"median": med, "min": min(v), "max": max(v), "n": len(v),
                             "spread_pct": 100 * (max(v) - min(v)) / med if med else 0}
    for k in summary:
        for t, s in summary[k].items():
            b = summary[base].get(t)
            s["ratio"] = s["median"] / b["median"] if b and b["median"] else None
            if k != base and b and b["median"]:
                s["diff_pct"] = 100 * (s["median"] - b["median"]) / b["median"]
                s["ci_pct"] = list(median_diff_ci(values[base][t], values[k][t]))
    return summary


LEGEND = ("median of all runs (± half the range from the fastest to the slowest run, in % of "
          "the median, which one slow run inflates; x: ratio to the unpatched kernel's median); "
          "Δ: the difference of a kernel's median from the unpatched kernel's, in %, and its "
          f"{LEVEL:.0%} bootstrap confidence interval ({RESAMPLES} resamples of both kernels' "
          f"runs, seed {SEED}): an interval that holds 0 is no difference this run resolves")


def ci_cell(s: dict) -> str:
    if "ci_pct" not in s:
        return "-"
    lo, hi = s["ci_pct"]
    return f"{s['diff_pct']:+.1f}% [{lo:+.1f}, {hi:+.1f}]"


def table(summary: dict, units: dict) -> str:
    kernels = list(summary)
    others = [k for k in kernels[1:] if any("ci_pct" in s for s in summary[k].values())]
    lines = ["| test | unit | " + " | ".join(kernels + [f"Δ {k}" for k in others]) + " |",
             "|---|---|" + "---|" * (len(kernels) + len(others))]
    for t in TESTS:
        if t not in summary[kernels[0]]:
            continue
        cells = []
        for k in kernels:
            s = summary[k][t]
            ratio = "" if k == kernels[0] else f", x{s['ratio']:.3f}"
            cells.append(f"{s['median']:.3g} (±{s['spread_pct'] / 2:.0f}%{ratio})")
        cells += [ci_cell(summary[k].get(t, {})) for k in others]
        lines.append(f"| {t} | {units.get(t, '')} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def machine_line(machine: dict) -> str:
    """Where the run ran, from its record's machine (results.machine())."""
    host = (f"{machine.get('host_cpu', '?')}, {machine.get('host_cpus', '?')} CPUs, "
            f"{machine.get('host_memory_mb', '?')} MiB, kernel {machine.get('host_kernel', '?')}"
            + (f", itself a VM ({machine.get('host_virtualization') or 'unknown'})"
               if machine.get("host") == "vm" else ""))
    if machine.get("guest_cpus") is None:
        return f"machine: natively on {host}"
    return (f"machine: a guest of {machine['guest_cpus']} vCPUs and "
            f"{machine.get('guest_memory', '?')} under {(machine.get('accel') or '?').upper()} "
            f"on {host}")


def make_record(values: dict, units: dict, kernels: list, *, argv: list, args: dict,
                started: float, seconds: float) -> dict:
    """The run's record: the metadata (with the machine, results.machine()),
    every value, and the summary."""
    return {**results.metadata("bench-offcost", kernels=kernels,
                               machine_info=results.machine(CPUS, MEMORY), argv=argv,
                               args=args, started=started),
            "seconds": round(seconds, 1),
            "configs": "tinyconfig + kernel/configs/lean.config (+ off.config for =n)",
            "bootstrap": {"resamples": RESAMPLES, "seed": SEED, "level": LEVEL},
            "units": units, "values": values, "summary": summarize(values)}


def markdown(record: dict) -> str:
    """offcost.md: the table, its legend, and the machine."""
    return (table(record["summary"], record["units"]) + "\n\n" + LEGEND + "\n\n" +
            machine_line(record["machine"]))


def main(argv=None) -> int:
    argv_ = sys.argv[1:] if argv is None else argv
    ap = entry.parser(__doc__)
    ap.add_argument("--boots", type=int, default=3, help="boots of each kernel (default 3)")
    ap.add_argument("--runs", type=int, default=5, help="runs of each test per boot (default 5)")
    ap.add_argument("--out", default=str(RESULTS / "offcost"), help="the run's files")
    results.add_record_dir(ap)
    a = ap.parse_args(argv)
    if a.boots < 1 or a.runs < 1:
        print("bench-offcost: --boots and --runs must be at least 1", file=sys.stderr)
        return 2
    kernels = [(name, BUILD / path) for name, path in KERNELS]
    for name, path in kernels:
        try:
            vm.find_image(path)
        except vm.VMError as e:
            print(f"bench-offcost: kernel '{name}': {e} (make bench-offcost builds all three)",
                  file=sys.stderr)
            return 2
    bench = BUILD / "bench/offcost"
    if not bench.exists():
        print(f"bench-offcost: no {bench}: run make bench-programs", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    values = {name: {} for name, _ in kernels}
    units = {}
    releases = {}
    sysctl = {}
    t0 = time.time()
    for b in range(a.boots):
        for name, path in kernels[b % len(kernels):] + kernels[:b % len(kernels)]:
            releases[name] = vm.kernel_release(path)
            print(f"bench-offcost: boot {b + 1}/{a.boots}: {name} ({releases[name]})", flush=True)
            r = vm.run(path, GUEST.format(bench=bench, runs=a.runs), memory=MEMORY, cpus=CPUS,
                       timeout=900 + 300 * a.runs, log_path=out / f"console-{b}-{len(values[name])}.log")
            if not r.ok:
                print(f"bench-offcost: {name}: " + r.describe(), file=sys.stderr)
                return 1
            for line in r.console.splitlines():
                f = line.split()
                if len(f) == 5 and f[0] == "RESULT":
                    units[f[1]] = f[4]
                elif len(f) == 2 and f[0] == "ASYNC_FORK_SYSCTL":
                    sysctl[name] = f[1]
            for t, v in parse(r.console).items():
                values[name].setdefault(t, []).extend(v)
    record = make_record(values, units, [results.kernel(p, label=n, async_fork=sysctl.get(n))
                                         for n, p in kernels],
                         argv=argv_, args=vars(a), started=t0, seconds=time.time() - t0)
    md = markdown(record)
    (out / "offcost.md").write_text(md + "\n")
    print(md)
    png = plots.offcost(out / "offcost.png", record)
    path = results.write(record, Path(a.record_dir or out.parent), "bench-offcost")
    print(f"bench-offcost: record {path}" + (f", plot {png}" if png else ""))
    return 0



if __name__ == "__main__":
    sys.exit(entry.run(main, "bench-offcost"))
