# SPDX-License-Identifier: GPL-2.0
"""asyncfork VERB [ARGS...]: the harness's one command line.

Each verb that a make target runs has the target's name (make bench-fork
runs `asyncfork bench-fork` with the Makefile's variables: NATIVE=, the
*_ARGS); `asyncfork VERB --help` lists the verb's arguments and their
defaults.  The Makefile runs it as `.venv/bin/python -m asyncfork VERB`
(python/asyncfork/__main__.py), which needs no install; scripts/setup.sh
installs the `asyncfork` command into .venv.  A verb's module is imported
only when it runs: `asyncfork deb-config` runs with the system's python3,
which has none of the harness's dependencies.
"""

import importlib
import sys
import textwrap

from asyncfork import entry

# verb: (module, its function that takes the arguments, what it does).
VERBS = {
    "vm": ("vm", "main", "boot a built kernel, run one command in it, judge its log "
           "(make vm)"),
    "demo": ("demo", "main", "snapshot Redis (or Valkey) under load, default fork and "
             "Async-fork (make demo)"),
    "bench-fork": ("bench_fork", "main", "fork() against memory size and copy threads "
                   "(make bench-fork)"),
    "bench-redis": ("bench_redis", "main", "the demo's snapshot across sizes, loads and copy "
                    "threads (make bench-redis)"),
    "bench-sync": ("bench_sync", "main", "how long the parent's writes wait right after "
                   "fork(), kernels side by side (make bench-sync)"),
    "bench-tlbi": ("bench_tlbi", "main", "the TLB invalidations of one fork, counted by "
                   "QEMU, default fork and Async-fork (make bench-tlbi ARCH=arm64)"),
    "bench-offcost": ("bench_offcost", "main", "the series' cost when unused, three kernels "
                      "of one config (make bench-offcost)"),
    "snapshot": ("snapshot", "run", "one Redis/Valkey snapshot run and its RDB checks, in a "
                 "guest or natively (what demo and bench-redis run)"),
    "soak": ("soak", "main", "the randomized tests for as long as asked (make soak)"),
    "mutate": ("mutate", "main", "each path-table row's hook turned off, its test run "
               "(make mutate)"),
    "check-kernel": ("check_kernel", "main", "the series as the kernel's build bots check "
                     "it, then its record (make check-kernel)"),
    "test-deb": ("test_deb", "main", "boot the package make deb built, run the snapshot "
                 "tests on it (make test-deb)"),
    "deb-config": ("deb_config", "main", "a packaged kernel's .config against Debian's "
                   "plus the stated changes (make deb-config)"),
    "report": ("report", "main", "docs/results.md and its plots from the committed records "
               "(make report)"),
    "attribution": ("attribution", "main", "where the slow requests' time went, from "
                    "--attribute records"),
    "fork-graph": ("fork_graph", "main", "a function_graph trace of fork() summed by call "
                   "path"),
}


def usage() -> str:
    width = max(map(len, VERBS))
    lines = ["usage: asyncfork VERB [ARGS...]", "",
             "The harness of the Async-fork series.  A verb that a make target runs has the",
             "target's name (make VERB runs it with the Makefile's variables); asyncfork",
             "VERB --help lists its arguments and their defaults.", "", "verbs:"]
    for verb, (_, _, what) in VERBS.items():
        lines += textwrap.wrap(what, 79, initial_indent=f"  {verb:<{width}}  ",
                               subsequent_indent=" " * (width + 4), break_on_hyphens=False)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    verb, args = argv[0], argv[1:]
    if verb not in VERBS:
        print(f"asyncfork: no verb '{verb}'\n\n{usage()}", file=sys.stderr)
        return 2
    module, function, _ = VERBS[verb]
    # The verb's --help and errors say "asyncfork VERB" (argparse's prog).
    sys.argv = [f"asyncfork {verb}", *args]
    run = getattr(importlib.import_module(f"asyncfork.{module}"), function)
    return entry.run(run, verb, args)
