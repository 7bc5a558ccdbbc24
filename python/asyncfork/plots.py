# SPDX-License-Identifier: GPL-2.0
"""Every plot of the harness, drawn from a run's record (asyncfork.results):
the run draws them when it ends, and `make report` draws them again from
the records committed under docs/results/, with the same code."""

import sys
from pathlib import Path

# The causes of --attribute's bands, with their colours.
BANDS = (("fork", "red"), ("sync", "orange"), ("child copy", "purple"),
         ("child on CPU", "gray"), ("runnable", "blue"), ("fault", "green"),
         ("mmap_lock wait", "brown"))
TRACE_LEAD_S = 2.0      # asyncfork.snapshot starts tracing this long before BGSAVE


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


def _save(plt, fig, path: Path) -> Path:
    # No timestamp or version in the file: the same data gives the same PNG.
    fig.savefig(path, dpi=120, metadata={"Software": None})
    plt.close(fig)
    return path


def size_name(mb: int) -> str:
    return f"{mb // 1024} GiB" if mb >= 1024 and mb % 1024 == 0 else f"{mb} MiB"


def where(record: dict) -> str:
    """"native", "KVM" or "TCG": where a run's times come from."""
    if record.get("where") == "native":
        return "native"
    return "KVM" if record.get("machine", {}).get("accel") == "kvm" else "TCG"


def demo_latency(path: Path, record: dict) -> Path | None:
    """The demo's latency over time, one panel per mode (with --attribute,
    a band of causes under each): the median and the max of each bin of
    the record's timeline, the fork, the end of the snapshot, and the
    server's synchronizations with their durations."""
    plt = pyplot()
    if plt is None:
        return None
    modes = list(record["modes"])
    bands = any("bands" in record["modes"][m].get("attribution", {}) for m in modes)
    per = 2 if bands else 1
    fig, axes = plt.subplots(per * len(modes), 1, sharex=True, squeeze=False,
                             figsize=(10, (4.6 if bands else 3.2) * len(modes)),
                             gridspec_kw={"height_ratios": [3, 1.6] * len(modes)}
                             if bands else None)
    server = record.get("server", {}).get("name", "redis")
    for i, mode in enumerate(modes):
        m = record["modes"][mode]
        ax = axes[per * i, 0]
        if bands:
            attribution_bands(axes[per * i + 1, 0], m.get("attribution", {}))
        tl = m["timeline"]
        ax.plot(tl["t_s"], [max(v, 1e-3) for v in tl["max_ms"]], ".", ms=2,
                label=f"slowest request of each {tl['bin_s'] * 1000:.0f} ms")
        ax.plot(tl["t_s"], [max(v, 1e-3) for v in tl["p50_ms"]], "-", lw=0.6, color="gray",
                label="median")
        ax.axvline(0, color="red", label="BGSAVE (fork)")
        ax.axvline(m["snapshot_s"], color="gray", linestyle="--", label="RDB written")
        if m.get("syncs"):
            ax.scatter([t for t, _ in m["syncs"]], [max(d, 1e-3) for _, d in m["syncs"]],
                       s=12, marker="x", color="orange",
                       label="PTE-table sync in the server (its duration)")
        ax.set_yscale("log")
        ax.set_ylabel("latency (ms)")
        ax.set_title(f"{server}-server, "
                     f"{'default fork' if mode == 'default' else 'Async-fork'}: fork() "
                     f"{m['fork_ms']:.2f} ms, max during snapshot "
                     f"{m['snapshot']['max_ms']:.1f} ms")
        ax.legend(loc="upper right", fontsize=7)
        if bands:
            # The traced part of the run: from just before BGSAVE.
            ax.set_xlim(-m["trace_lead_s"] - 0.5, m["snapshot_s"] + 1.5)
    axes[-1, 0].set_xlabel("seconds since BGSAVE")
    fig.tight_layout()
    return _save(plt, fig, path)


def attribution_bands(ax, att: dict) -> None:
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


def interruptions(path: Path, series: dict) -> Path | None:
    """Histogram of synchronization durations: {label: [ms, ...]}."""
    every = [d for ds in series.values() for d in ds]
    plt = pyplot() if every else None
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(8, 3.5))
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
    return _save(plt, fig, path)


def demo_interruptions(path: Path, record: dict) -> Path | None:
    return interruptions(path, {m: t["interruptions"]["durations_ms"]
                                for m, t in record["modes"].items()
                                if t["interruptions"]["durations_ms"]})


def fork_median(record: dict, size: int, thp: bool, async_: bool, key: str,
                threads: int | None = None) -> float:
    """A bench-fork median, ms: key "fork_ms" (the parent in fork()) or
    "child_ms" (fork() call to the child's first instruction)."""
    threads = threads or record["copy_threads"][0]
    for m in record["medians"]:
        if (m["size_mb"], m["thp"], m["async"]) == (size, thp, async_) and \
                (not async_ or m["copy_threads"] == threads):
            return m[key]
    return float("nan")


def fork_vs_size(path: Path, record: dict) -> Path | None:
    """bench-fork: fork() against the resident size, default fork and
    Async-fork, 4 KiB pages and THP, and the child's whole copy."""
    plt = pyplot()
    if plt is None:
        return None
    sizes = record["sizes_mb"]
    fig, ax = plt.subplots(figsize=(7, 5))
    for thp, style in ((False, "-"), (True, ":")):
        pages = "THP" if thp else "4 KiB"
        ax.plot(sizes, [fork_median(record, s, thp, False, "fork_ms") for s in sizes],
                "o" + style, color="tab:red", label=f"default fork, {pages}")
        ax.plot(sizes, [fork_median(record, s, thp, True, "fork_ms") for s in sizes],
                "o" + style, color="tab:blue", label=f"Async-fork: fork() in the parent, {pages}")
    ax.plot(sizes, [fork_median(record, s, False, True, "child_ms") for s in sizes], "s--",
            color="tab:green", label="Async-fork: until the child's copy is done, 4 KiB")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sizes, [size_name(s) for s in sizes])
    ax.set_xlabel("resident anonymous memory")
    ax.set_ylabel("ms (log)")
    ax.set_title(f"fork() against memory size ({record['kernel']}, {where(record)})",
                 fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=2)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return _save(plt, fig, path)


def fork_copy_threads(path: Path, record: dict) -> Path | None:
    """bench-fork: the child's whole copy against the number of copiers,
    one line per size, with the default fork of that size for reference."""
    threads = record["copy_threads"]
    plt = pyplot() if len(threads) > 1 else None
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for s, color in zip(record["sizes_mb"], colors * 2):
        ax.plot(threads, [fork_median(record, s, False, True, "child_ms", t) for t in threads],
                "o-", color=color, label=size_name(s))
        ax.axhline(fork_median(record, s, False, False, "fork_ms"), color=color, ls=":", lw=1)
    ax.set_xticks(threads)
    ax.set_yscale("log")
    ax.set_xlabel("vm.async_fork_copy_threads (the child and its helper threads)")
    ax.set_ylabel("fork() call to the child's first instruction, ms (log)")
    ax.set_title(f"Async-fork: the child's copy against copy threads, 4 KiB pages\n"
                 f"dotted: the default fork of the same size ({record['kernel']}, "
                 f"{where(record)})", fontsize=10)
    ax.legend(fontsize=8, title="resident", title_fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return _save(plt, fig, path)


def _reference(rows: list) -> list:
    """bench-redis configurations at the reference load (80% SET, 8 clients)."""
    return [r for r in rows if r["config"]["set_ratio"] == 0.8 and r["config"]["clients"] == 8]


def redis_fork_vs_size(path: Path, record: dict) -> Path | None:
    """bench-redis: the server's fork() against the dataset, both ways."""
    sweep = [r for r in _reference(record["runs"])
             if r["config"]["threads"] == 1 and "default" in r["table"] and "async" in r["table"]]
    plt = pyplot() if sweep else None
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.5))
    xs = [r["config"]["dataset_mb"] for r in sweep]
    for mode, label in (("default", "default fork"), ("async", "Async-fork")):
        ax.plot(xs, [r["table"][mode]["fork_ms"] for r in sweep], "o-", label=label)
    ax.set_xlabel("dataset (MiB)")
    ax.set_ylabel("fork() in the server (ms)")
    ax.set_yscale("log")
    ax.set_title(f"{record['kernel']}, {where(record)}", fontsize=9)
    ax.legend()
    fig.tight_layout()
    return _save(plt, fig, path)


def redis_copy_threads(path: Path, record: dict) -> Path | None:
    """bench-redis: Async-fork at the reference load and the largest size,
    against the number of copy threads: the child's copy, the server's
    synchronizations and the latency during the snapshot."""
    ref = [r for r in _reference(record["runs"]) if "async" in r["table"]]
    size = max((r["config"]["dataset_mb"] for r in ref), default=None)
    by_t = sorted((r["config"]["threads"], r["table"]["async"]) for r in ref
                  if r["config"]["dataset_mb"] == size)
    plt = pyplot() if len(by_t) > 1 else None
    if plt is None:
        return None
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
    return _save(plt, fig, path)


def redis_interruptions(path: Path, record: dict) -> Path | None:
    return interruptions(path, {r["config"]["name"]: r["table"]["async"]["interruptions"]
                                ["durations_ms"] for r in record["runs"]
                                if "async" in r["table"] and
                                r["table"]["async"]["interruptions"]["durations_ms"]})


def offcost(path: Path, record: dict) -> Path | None:
    """bench-offcost: each kernel's median per test against the first
    (unpatched) kernel's, with the bootstrap interval of the difference of
    the medians (bench_offcost.summarize()'s ci_pct) where the summary has it,
    else the range of its runs (min to max, which one slow run inflates)."""
    summary = record["summary"]
    kernels = list(summary)
    tests = [t for t in summary[kernels[0]] if all(t in summary[k] for k in kernels)]
    plt = pyplot() if tests else None
    if plt is None:
        return None
    base = summary[kernels[0]]
    ci = all("ci_pct" in summary[k][t] for k in kernels[1:] for t in tests)
    fig, ax = plt.subplots(figsize=(8, 3.8))
    width = 0.8 / len(kernels)
    for i, k in enumerate(kernels):
        xs = [j + (i - (len(kernels) - 1) / 2) * width for j in range(len(tests))]
        med = [summary[k][t]["median"] / base[t]["median"] for t in tests]
        if ci and i:
            lo = [m - (1 + summary[k][t]["ci_pct"][0] / 100) for m, t in zip(med, tests)]
            hi = [1 + summary[k][t]["ci_pct"][1] / 100 - m for m, t in zip(med, tests)]
        elif ci:
            lo = hi = [0.0] * len(tests)
        else:
            lo = [m - summary[k][t]["min"] / base[t]["median"] for m, t in zip(med, tests)]
            hi = [summary[k][t]["max"] / base[t]["median"] - m for m, t in zip(med, tests)]
        ax.errorbar(xs, med, yerr=[[max(0.0, x) for x in lo], [max(0.0, x) for x in hi]],
                    fmt="o", capsize=3, label=k)
    ax.axhline(1.0, color="black", lw=0.6)
    ax.set_xticks(range(len(tests)), tests, fontsize=8)
    ax.set_ylabel(f"median / {kernels[0]}'s median")
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_title("What the series costs unused: median of each kernel's runs, and "
                 + ("95% bootstrap interval of its difference" if ci
                    else "their range (min to max)"), fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return _save(plt, fig, path)
