# SPDX-License-Identifier: GPL-2.0
"""The load generator (bench/loadgen.c): its command line, and its log read
back as latency per request, windows and a timeline.

loadgen sends an open-loop load (every request at its intended send
time, whatever the server does) and logs one line per request: its
intended send time (us from its start), its latency from that time (us)
and its kind.  Latency counts from the intended send time, so a stall
counts for every request it delays.
"""

import math
from pathlib import Path

TIMELINE_BIN_S = 0.1    # the timeline's resolution


def command(binary: Path, *, port: int, rate: int, clients: int, keys: int, dist: str,
            set_ratio: float, value_size: int, seed: int, tag: str, out: Path,
            set_log: Path) -> list[str]:
    """loadgen for a run: until stopped (SIGTERM), its latency log in out,
    every SET it sent in set_log (for the RDB check)."""
    return [str(binary), "--port", str(port), "--rate", str(rate), "--duration", "86400",
            "--clients", str(clients), "--keys", str(keys), "--dist", dist,
            "--set-ratio", str(set_ratio), "--value-size", str(value_size), "--seed", str(seed),
            "--tag", tag, "--out", str(out), "--set-log", str(set_log)]


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


def timeline(rows, origin_ns: int, bin_s: float = TIMELINE_BIN_S) -> dict:
    """The latency over time in bins of bin_s seconds from origin_ns (the
    fork): each bin's start (s), request count, median and max (ms).  What
    a run's record keeps instead of every request, and what its plot shows."""
    bins: dict[int, list] = {}
    for t, lat, _ in rows:
        bins.setdefault(math.floor((t - origin_ns) / 1e9 / bin_s), []).append(lat / 1e3)
    out = {"bin_s": bin_s, "t_s": [], "requests": [], "p50_ms": [], "max_ms": []}
    for b in sorted(bins):
        vals = sorted(bins[b])
        out["t_s"].append(round(b * bin_s, 3))
        out["requests"].append(len(vals))
        out["p50_ms"].append(round(pct(vals, 0.5), 4))
        out["max_ms"].append(round(vals[-1], 4))
    return out
