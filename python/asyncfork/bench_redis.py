# SPDX-License-Identifier: GPL-2.0
"""Benchmark: the Redis (or Valkey) snapshot of the demo across dataset
sizes, SET ratios, client counts and copy threads, in one boot of the lean
kernel or, when asked, natively on a machine whose kernel has Async-fork.

Each configuration runs asyncfork.snapshot (a fresh server, its
dataset, an open-loop load, BGSAVE with the default fork and with
Async-fork), then each RDB is checked exactly (by the host, after a VM run)
and the benchmark reports, per configuration: fork() time both ways, the
latency of the requests sent during the snapshot against an equal window
before it, the server's interruptions by proactive synchronization
(tracepoints) and the child's copy time.  Where it runs is decided as in
the demo (the VM unless NATIVE=1 or --native; natively, each
configuration prints the settings it will change before it does).
Files: BUILD/results/SERVER-bench/ (meta.json, a folder per configuration,
*.png); the record: BUILD/results/bench-redis-SERVER-DATE.json.
"""

import json
import sys
import time
from pathlib import Path

from asyncfork import attribution, demo, entry, native, plots, results, snapshot, vm
from asyncfork.paths import RESULTS


def numbers(text: str, kind, what: str) -> list:
    try:
        vals = [kind(x) for x in text.split(",") if x]
    except ValueError:
        vals = []
    if not vals:
        print(f"bench-redis: {what} must be a comma-separated list of numbers, not '{text}'",
              file=sys.stderr)
        sys.exit(2)
    return vals


def configurations(a) -> list:
    """(name, asyncfork.snapshot arguments, dataset MiB): the size sweep at
    the reference load, then the other parameters one at a time at the
    smallest size (copy threads at the largest, Async-fork only).  With
    --grid: every size with every client count of --clients, nothing else
    (the snapshot-tail runs: 1, 2 and 4 GiB with 1 and 32 clients)."""
    ref = {"dataset_mb": a.sizes[0], "set_ratio": 0.8, "clients": 8, "threads": 1,
           "modes": "default,async"}
    if getattr(a, "grid", False):
        cfgs = [dict(ref, dataset_mb=s, clients=c) for s in a.sizes for c in a.clients]
        for c in cfgs:
            c["name"] = f"{c['dataset_mb']}M-set80-c{c['clients']}-t1"
        return cfgs
    cfgs = [dict(ref, dataset_mb=s) for s in a.sizes]
    cfgs += [dict(ref, set_ratio=x) for x in a.set_ratios if x != ref["set_ratio"]]
    cfgs += [dict(ref, clients=c) for c in a.clients if c != ref["clients"]]
    cfgs += [dict(ref, dataset_mb=a.sizes[-1], threads=t, modes="async")
             for t in a.threads if t != 1]
    for c in cfgs:
        c["name"] = (f"{c['dataset_mb']}M-set{int(c['set_ratio'] * 100)}-c{c['clients']}"
                     f"-t{c['threads']}")
    return cfgs


def main(argv=None) -> int:
    argv_ = sys.argv[1:] if argv is None else argv
    started = time.time()
    ap = entry.parser(__doc__)
    demo.server_arguments(ap)
    ap.add_argument("--memory", help="guest memory (default: from the largest dataset; "
                    "VM only)")
    ap.add_argument("--sizes", default="256,512,1024", help="dataset sizes, MiB")
    ap.add_argument("--set-ratios", default="0.2,1.0", help="SET ratios besides 0.8")
    ap.add_argument("--clients", default="1,32", help="client counts besides 8")
    ap.add_argument("--threads", default="2,4", help="copy threads besides 1")
    ap.add_argument("--grid", action="store_true",
                    help="every size with every client count of --clients, at SET "
                    "ratio 0.8 and one copy thread, instead of one parameter at a time")
    ap.add_argument("--rate", type=int, default=demo.DEFAULT_RATE)
    ap.add_argument("--out", help="the run's files (default BUILD/results/SERVER-bench)")
    results.add_record_dir(ap)
    ap.add_argument("--attribute", action="store_true",
                    help="trace each snapshot (as the demo's --attribute) and say where "
                    "the slow requests' time went")
    ap.add_argument("--report", action="store_true",
                    help="analyse and print the results in --out again, without a run")
    a = ap.parse_args(argv)
    a.out = a.out or str(RESULTS / f"{a.server}-bench")
    if a.report:
        if not (Path(a.out) / "meta.json").exists():
            print(f"bench-redis: no results in {a.out}", file=sys.stderr)
            return 2
        return 0 if report(Path(a.out), Path(a.record_dir) if a.record_dir else None) else 1
    on_machine = native.decide(a, "bench-redis")
    if on_machine is None:
        return 2
    if a.attribute:
        why = demo.attribute_unavailable(on_machine, Path(a.kernel))
        if why:
            print(f"bench-redis: --attribute: {why}; nothing was run", file=sys.stderr)
            return 2
    a.sizes = sorted(numbers(a.sizes, int, "--sizes"))
    a.set_ratios = numbers(a.set_ratios, float, "--set-ratios")
    a.clients = numbers(a.clients, int, "--clients")
    a.threads = numbers(a.threads, int, "--threads")
    if (a.sizes[0] < 16 or a.rate < 1 or any(not 0 <= x <= 1 for x in a.set_ratios) or
            any(c < 1 for c in a.clients) or any(not 1 <= t <= 32 for t in a.threads)):
        print("bench-redis: sizes at least 16 MiB, --rate and client counts at least 1, "
              "SET ratios in [0, 1], copy threads from 1 to 32", file=sys.stderr)
        return 2
    memory = demo.dataset_memory("bench-redis", a.sizes[-1], on_machine, a.memory, "--sizes")
    if memory is None:
        return 2

    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    cfgs = configurations(a)
    runs, budget = [], 300
    for c in cfgs:
        d = out / c["name"]
        d.mkdir(exist_ok=True)
        for f in [d / "result.json"] + list(d.glob("dump-*.rdb")):
            f.unlink(missing_ok=True)
        baseline = demo.baseline_seconds(c["dataset_mb"])
        runs.append((c["name"], d, [
            "--dataset-mb", str(c["dataset_mb"]), "--rate", str(a.rate),
            "--clients", str(c["clients"]), "--set-ratio", str(c["set_ratio"]),
            "--copy-threads", str(c["threads"]), "--modes", c["modes"],
            "--baseline", str(baseline), "--server", a.server] +
            (["--attribute"] if a.attribute else [])))
        budget += demo.run_budget(c["dataset_mb"], baseline)
    # Written first: --report can analyse what finished if the run is stopped.
    kernel = results.kernel(None if on_machine else Path(a.kernel),
                            async_fork="1 (memory.async_fork 0 or 1 per mode)")
    meta = {**results.metadata("bench-redis", kernels=[kernel],
                               machine_info=results.machine() if on_machine else
                               results.machine(demo.GUEST_CPUS, memory),
                               argv=argv_, args=vars(a), started=started),
            "server": a.server, "rate": a.rate, "configs": [c["name"] for c in cfgs]}
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    record_dir = Path(a.record_dir or out.parent)
    if on_machine:
        print(f"bench-redis: {len(cfgs)} configurations on this machine "
              f"({meta['kernel']}), {a.server}-server", flush=True)
        run_native(runs)
        return 0 if report(out, record_dir, time.time() - started) else 1
    print(f"bench-redis: {len(cfgs)} configurations in one boot of {a.kernel} "
          f"({vm.kernel_release(Path(a.kernel))}), {memory}, "
          f"{'KVM' if vm.kvm_usable() else 'TCG emulation'}, {a.server}-server", flush=True)
    # One configuration failing (its RDB wrong, say) must not hide the others.
    script = "; ".join(
        f"echo 'guest: == {name}' && " + snapshot.guest_command(d, args)
        for name, d, args in runs)
    try:
        r = vm.run(a.kernel, script, memory=memory, cpus=demo.GUEST_CPUS,
                   timeout=budget, rwdirs=[out], log_path=out / "console.log",
                   echo="guest:")
    except vm.VMError as e:
        print(f"bench-redis: {e}", file=sys.stderr)
        return 2

    ok = report(out, record_dir, time.time() - started)
    if not r.ok:
        print("bench-redis: " + r.describe(), file=sys.stderr)
    return 0 if ok and r.ok else 1


def run_native(runs: list) -> None:
    """Each configuration on this machine, in this process, one after the
    other: its servers on free ports, its RDBs checked at once, every
    setting it changed put back when it ends (Ctrl-C stops them all)."""
    for name, d, args in runs:
        print(f"native: == {name}", flush=True)
        snapshot.run_here(d, args)


def report(out: Path, record_dir: Path | None = None, seconds: float | None = None) -> bool:
    """Analyse the configurations of a run that have a result (all of them
    unless the guest was stopped), print the table, write the run's record
    (into record_dir, if given: asyncfork.results) and plot.  True if every
    configuration ran and every RDB was exact."""
    meta = json.loads((out / "meta.json").read_text())
    rows, ok = [], True
    for name in meta["configs"]:
        d = out / name
        if not (d / "result.json").exists():
            see = "" if meta["where"] == "native" else f" (see {out / 'console.log'})"
            print(f"bench-redis: {name}: no result{see}", file=sys.stderr)
            ok = False
            continue
        result = json.loads((d / "result.json").read_text())
        if any("rdb" not in m for m in result["modes"].values()):
            print(f"bench-redis: {name}: checking its RDB files on the host", flush=True)
            snapshot.check_on_host(d)
            result = json.loads((d / "result.json").read_text())
        args = result["args"]
        config = {"name": name, "dataset_mb": args["dataset_mb"], "set_ratio": args["set_ratio"],
                  "clients": args["clients"], "threads": args["copy_threads"],
                  "modes": args["modes"], "server": result.get("server", "redis"),
                  "server_line": demo.server_line(result),
                  "allocator": result.get("allocator")}
        table = demo.analyse(d, result)
        ok &= all(t["rdb_exact"] for t in table.values())
        rows.append({"config": config, "table": table})
    record = record_of(meta, rows)
    if seconds is not None:
        record["seconds"] = round(seconds, 1)
    print_tables(rows, meta["rate"])
    for row in rows:
        atts = {m: t["attribution"] for m, t in row["table"].items() if "attribution" in t}
        if atts:
            print(f"\n== {row['config']['name']}: where the time went (--attribute)")
            attribution.print_report(atts)
    atts = [(r["config"]["name"], {m: t["attribution"] for m, t in r["table"].items()
                                    if "attribution" in t}) for r in rows]
    for lines in (attribution.group_table(atts, catch_all_apart=True), attribution.own_table(atts)):
        if lines:
            print()
            print("\n".join(lines))
    for png in (plots.redis_fork_vs_size(out / "fork-vs-size.png", record),
                plots.redis_copy_threads(out / "copy-threads.png", record),
                plots.redis_interruptions(out / "interruptions.png", record)):
        if png:
            print(f"plot: {png}")
    if record_dir:
        path = results.write(record, record_dir, "bench-redis-" + meta["server"])
        print(f"record: {path} (kernel {meta['kernel']}, {meta['where']}, "
              f"commit {meta['commit']})")
    if meta["where"] == "vm" and meta["machine"]["accel"] != "kvm":
        print("note: this guest runs under TCG emulation; compare the modes of one "
              "configuration, not absolute times.")
    return ok


def record_of(meta: dict, rows: list) -> dict:
    """The run's record: its metadata and each configuration's analysis,
    with the analysis's own commit (--report may analyse a run again later).
    The attribution's timeline bands stay out: only the demo plots them, and
    they were nine tenths of a record (5 MB for a grid)."""
    def lean(table: dict) -> dict:
        return {m: {**t, "attribution": {k: v for k, v in t["attribution"].items()
                                         if k != "bands"}} if "attribution" in t else t
                for m, t in table.items()}
    return {**meta, "runs": [{**r, "table": lean(r["table"])} for r in rows],
            "analysed_commit": vm.git_describe()}


def ratio(x, y) -> str:
    return f"{x / y:.1f}x" if y else "-"


def print_tables(rows: list, rate: int) -> None:
    servers = sorted({r["config"]["server_line"] for r in rows})
    print(f"\n{', '.join(servers) or 'Redis'}: BGSAVE under an open-loop load of {rate} "
          f"requests/s; latency of the "
          f"requests sent during the snapshot, ms ('x before': max against an equal "
          f"window before BGSAVE); syncs: the server's interruptions by Async-fork")
    print(f"{'dataset':>8} {'SET':>4} {'cli':>4} {'thr':>4} | {'fork ms':>8} {'p99':>7} "
          f"{'max':>7} {'x before':>8} | {'fork ms':>8} {'p99':>7} {'max':>7} "
          f"{'x before':>8} {'syncs':>6} {'longest':>8} {'child ms':>9} | RDBs")
    print(f"{'':>24} | {'default fork':^34} | {'Async-fork':^60} |")
    for row in rows:
        c, t = row["config"], row["table"]
        line = f"{c['dataset_mb']:>6}Mi {c['set_ratio']:>4.1f} {c['clients']:>4} {c['threads']:>4} |"
        for mode in ("default", "async"):
            if mode not in t:
                line += f" {'(not run)':>33} |" if mode == "default" else ""
                continue
            m = t[mode]
            s, b = m["snapshot"], m["baseline"]
            line += (f" {m['fork_ms']:>8.2f} {s['p99_ms']:>7.1f} {s['max_ms']:>7.1f} "
                     f"{ratio(s['max_ms'], b['max_ms']):>8}")
            if mode == "async":
                i = m["interruptions"]
                child = f"{i['child_copy_ms']:.1f}" if i["child_copy_ms"] is not None else "?"
                line += f" {i['syncs']:>6} {i['sync_max_ms']:>8.3f} {child:>9}"
            line += " |"
        exact = [m["rdb_exact"] for m in t.values()]
        line += " " + demo.rdb_word(False if False in exact else
                                          None if None in exact else True)
        print(line)



if __name__ == "__main__":
    sys.exit(entry.run(main, "bench-redis"))
