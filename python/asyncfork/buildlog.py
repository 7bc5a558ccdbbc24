# SPDX-License-Identifier: GPL-2.0
"""A kernel build's log and progress line.

Runs a kernel make (quiet, V=0: one "  CC      mm/memory.o" line per
step) with its whole output going to a log file, and shows instead how far
the build is: steps done of the last build's total, time elapsed, and an
estimate of the time left.  The last successful build's duration and step
count are kept beside the log (the stats file) for the next build of the
same output folder; a first build shows its count and elapsed time only.

On a terminal the line is rewritten in place; otherwise (a log file, CI)
a line is printed every 10% or every two minutes.  A failed build prints
the log's path and the lines that matter: the compiler's and the linker's
errors, make's "Error" lines, and the end of the log.

    python -m asyncfork.buildlog --log OUT/build.log --stats OUT/build-stats.json \\
        --label "build-kernel: lean" -- make -C SRC O=OUT V=0 -j2 bzImage

(scripts/build-kernel.sh and build-unpatched.sh run it this way.)  It
imports nothing else of the package: the scripts run it with any python3.
"""

import argparse
import json
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# A step of a quiet kbuild: two spaces, the command in capitals, its target
# ("  CC      mm/memory.o", "  CC [M]  fs/ext4/inode.o", "  LD      vmlinux.o",
# "  AR      mm/built-in.a", "  HOSTCC  scripts/kallsyms").
STEP_RE = re.compile(r"^  [A-Z][A-Z0-9_-]*(?: \[M\])?\s+\S")
# What makes a failed build fail: compiler and linker errors, make's own.
ERROR_RE = re.compile(r"\berror:|\bundefined reference to\b|^make(?:\[\d+\])?: \*\*\* "
                      r"|\bError \d+\b|^ERROR: ")
WARNING_RE = re.compile(r"\bwarning:")


@dataclass
class Stats:
    """The last successful build of an output folder."""
    seconds: float
    steps: int


def is_step(line: str) -> bool:
    return bool(STEP_RE.match(line))


def read_stats(path: Path) -> Stats | None:
    try:
        d = json.loads(Path(path).read_text())
        stats = Stats(float(d["seconds"]), int(d["steps"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return stats if stats.steps > 0 and stats.seconds >= 0 else None


def keep_stats(old: Stats | None, new: Stats) -> bool:
    """Whether a finished build's stats replace the stored ones: a build
    that did little (nothing to do, one file changed) is no measure of the
    next full one, so only one with at least half the steps of the last."""
    return old is None or new.steps * 2 >= old.steps


def write_stats(path: Path, stats: Stats) -> None:
    Path(path).write_text(json.dumps({"seconds": round(stats.seconds, 1),
                                      "steps": stats.steps,
                                      "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                time.gmtime())}) + "\n")


def remaining(done: int, elapsed: float, last: Stats | None) -> float | None:
    """Seconds left, estimated: at the last build's pace until a fifth of
    its steps are done, then at this build's own pace (a warm ccache makes a
    rebuild much faster than the build before it).  None without a last
    build; 0 once past its step count."""
    if last is None:
        return None
    frac = min(done / last.steps, 1.0)
    if frac >= 1.0:
        return 0.0
    if frac < 0.2:
        return max(last.seconds * (1 - frac), last.seconds - elapsed, 0.0)
    return elapsed * (1 - frac) / frac


def fmt_time(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def progress_line(done: int, elapsed: float, last: Stats | None) -> str:
    """"1234/4321 steps (28%), 3:05 elapsed, about 7:40 left"; without a
    last build, "1234 steps, 3:05 elapsed, no estimate yet"."""
    if last is None:
        return f"{done} steps, {fmt_time(elapsed)} elapsed, no estimate yet"
    if done > last.steps:
        return (f"{done} steps (the last build had {last.steps}), "
                f"{fmt_time(elapsed)} elapsed, the last build took {fmt_time(last.seconds)}")
    left = remaining(done, elapsed, last)
    return (f"{done}/{last.steps} steps ({100 * done // last.steps}%), "
            f"{fmt_time(elapsed)} elapsed, about {fmt_time(left)} left")


def percent(done: int, last: Stats | None) -> int | None:
    return None if last is None else min(100, 100 * done // last.steps)


def due(pct: int | None, reported_pct: int | None, elapsed: float, reported_at: float,
        every_pct: int = 10, every_s: float = 120) -> bool:
    """Whether a line is due where the output is no terminal: at each
    every_pct percent, or every_s seconds after the last line."""
    if elapsed - reported_at >= every_s:
        return True
    return (pct is not None and reported_pct is not None
            and pct // every_pct > reported_pct // every_pct)


def failure_summary(lines: list[str], errors: int = 20, tail: int = 15) -> list[str]:
    """What a failed build's log says went wrong: its error lines (the
    first `errors` of them, once each), then its last `tail` lines."""
    seen, out = set(), []
    for line in lines:
        if ERROR_RE.search(line) and line not in seen:
            seen.add(line)
            out.append(line)
            if len(out) == errors:
                break
    end = [line for line in lines[-tail:] if line not in seen]
    return out + (["..."] if out and end else []) + end


class Display:
    """The progress line: rewritten in place on a terminal, else a line
    now and then (see due())."""

    def __init__(self, label: str, stream, tty: bool, last: Stats | None):
        self.label, self.stream, self.tty, self.last = label, stream, tty, last
        self.reported_pct, self.reported_at, self.shown = percent(0, last), 0.0, 0.0
        self.width = 0

    def update(self, done: int, elapsed: float, force: bool = False) -> None:
        text = f"{self.label}: {progress_line(done, elapsed, self.last)}"
        if self.tty:
            if force or elapsed - self.shown >= 0.5:
                try:
                    cols = os.get_terminal_size(self.stream.fileno()).columns
                except (OSError, ValueError, AttributeError):
                    cols = 120
                self.stream.write("\r" + text[:cols - 1] + "\x1b[K")
                self.stream.flush()
                self.shown, self.width = elapsed, len(text)
            return
        pct = percent(done, self.last)
        if force or due(pct, self.reported_pct, elapsed, self.reported_at):
            self.stream.write(text + "\n")
            self.stream.flush()
            self.reported_pct, self.reported_at = pct, elapsed

    def end(self) -> None:
        if self.tty and self.width:
            self.stream.write("\n")
            self.stream.flush()


def run(cmd: list[str], log: Path, stats_path: Path, label: str,
        stream=None, tty: bool | None = None) -> int:
    """Run `cmd` with its output into `log`, showing progress on `stream`
    (default stdout); returns its exit code."""
    stream = sys.stdout if stream is None else stream
    tty = stream.isatty() if tty is None else tty
    last = read_stats(stats_path)
    log = Path(log)
    log.parent.mkdir(parents=True, exist_ok=True)
    display = Display(label, stream, tty, last)
    done, warnings, partial = 0, 0, b""
    start = time.monotonic()
    # Unbuffered: the log shows what the build did so far (tail -f).
    with open(log, "wb", buffering=0) as f:
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT)
        fd = p.stdout.fileno()
        sel = selectors.DefaultSelector()
        sel.register(fd, selectors.EVENT_READ)
        try:
            while True:
                chunk = os.read(fd, 65536) if sel.select(timeout=1.0) else None
                if chunk == b"":
                    break
                if chunk:
                    f.write(chunk)
                    lines = (partial + chunk).split(b"\n")
                    partial = lines.pop()
                    for raw in lines:
                        line = raw.decode(errors="replace")
                        done += is_step(line)
                        warnings += bool(WARNING_RE.search(line))
                display.update(done, time.monotonic() - start)
            rc = p.wait()
        except KeyboardInterrupt:
            p.send_signal(signal.SIGINT)
            p.wait()
            display.end()
            stream.write(f"{label}: interrupted; log: {log}\n")
            return 130
        finally:
            sel.close()
            p.stdout.close()
        f.write(partial)
    elapsed = time.monotonic() - start
    if tty:
        display.update(done, elapsed, force=True)
    display.end()
    if rc != 0:
        text = log.read_text(errors="replace").splitlines()
        stream.write(f"{label}: FAILED after {fmt_time(elapsed)} (make exited {rc}); "
                     f"log: {log}\n")
        for line in failure_summary(text):
            stream.write(f"  {line}\n")
        stream.flush()
        return rc
    new = Stats(elapsed, done)
    if keep_stats(last, new):
        write_stats(stats_path, new)
    note = f", {warnings} warning lines" if warnings else ""
    stream.write(f"{label}: {done} steps in {fmt_time(elapsed)}{note}; log: {log}\n")
    stream.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--log", required=True, help="the build's whole output goes here")
    ap.add_argument("--stats", required=True,
                    help="the last build's duration and step count (read, then rewritten)")
    ap.add_argument("--label", default="build", help="the progress line's prefix")
    ap.add_argument("command", nargs="+", help="the make command (after --)")
    a = ap.parse_args(argv)
    try:
        return run(a.command, Path(a.log), Path(a.stats), a.label)
    except OSError as e:
        print(f"{a.label}: cannot run {a.command[0]}: {e.strerror}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
