# SPDX-License-Identifier: GPL-2.0
"""Where a fork() spends its time: sum the durations of a function_graph
trace (tracefs `trace`, with set_graph_function=kernel_clone and the
funcgraph-proc option) by call path, for the tasks whose name starts with
--task, down to --depth levels below kernel_clone.

Used for docs/findings/redis-fork-cost.md; the guest side is there.
"""

import collections
import re
import sys

from asyncfork import entry


def main(argv: list[str] | None = None) -> None:
    ap = entry.parser(__doc__)
    ap.add_argument("trace", help="a copy of /sys/kernel/tracing/trace")
    ap.add_argument("--task", default="redis-s", help="task name prefix (default redis-s)")
    ap.add_argument("--depth", type=int, default=4, help="call depth to report (default 4)")
    ap.add_argument("--top", type=int, default=30, help="rows to print (default 30)")
    a = ap.parse_args(argv)

    total: collections.Counter = collections.Counter()
    calls: collections.Counter = collections.Counter()
    stack: list[str] = []
    with open(a.trace) as f:
        for line in f:
            parts = line.rstrip("\n").split("|")
            if len(parts) < 3 or not parts[0].split(")", 1)[-1].strip().startswith(a.task):
                continue
            duration, fn = parts[1], "|".join(parts[2:])
            depth = (len(fn) - len(fn.lstrip(" ")) - 2) // 2
            name = fn.strip()
            if name.endswith("{"):
                stack = stack[:depth] + [name[:-1].strip().removesuffix("()")]
                continue
            if name.startswith("}"):
                closed = re.search(r"/\* (\S+) \*/", name)
                leaf = closed.group(1) if closed else (stack[depth] if len(stack) > depth else "?")
                stack = stack[:depth]
            else:
                leaf = name.rstrip(";").removesuffix("()")
            us = re.search(r"([0-9.]+) us", duration)
            if us and depth < a.depth:
                path = "/".join(stack[:depth] + [leaf])
                total[path] += float(us.group(1))
                calls[path] += 1
    for path, us in total.most_common(a.top):
        print(f"{us:10.0f} us {calls[path]:6d}  {path}")


if __name__ == "__main__":
    sys.exit(entry.run(main, "fork-graph"))
