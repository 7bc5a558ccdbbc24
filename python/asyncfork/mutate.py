# SPDX-License-Identifier: GPL-2.0
"""make mutate: each row of the path table, its hook turned off, its test run.

A test of a hook proves something only if it fails without the hook.  The
debug kernel has CONFIG_ASYNC_FORK_DEBUG (kernel/configs/debug.config):
/sys/kernel/debug/async_fork/mutate turns one hook off, everywhere or only
where one function calls it, and counts how often it was skipped.  One boot
runs, for every row of ROWS, the row's test with its hook off, then turns
the hook back on.  Verdicts:

  caught       the test failed, or the kernel reported a problem (a WARN
               that a zap below a mark fires counts: a run with a kernel
               report fails), or the guest died in the row; after a row
               that died or oopsed the kernel (taint D: a task died in the
               kernel, maybe holding locks), the remaining rows run in a
               new boot;
  missed       the hook was skipped and everything passed: a test gap;
  not reached  the hook was never skipped: the test does not exercise it
               (or the caller's name is wrong);
  failed, not reached
               the test failed although the hook was never skipped: a
               failure that says nothing about the hook (UFFDIO_MOVE's
               row, 2026-11-28);
  no test      a row without a test in the guest (ROWS says why).

The record (kind "mutate") lists row, hook, test, verdict and hits.
"""

import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from asyncfork import entry, programs, results
from asyncfork import suite as harness
from asyncfork.paths import BUILD, RESULTS

MUTATE = "/sys/kernel/debug/async_fork/mutate"
SELFTESTS = programs.SELFTESTS


@dataclass(frozen=True)
class Row:
    path: str      # the row of the path table in docs/design.md
    hook: str      # what is written to MUTATE: HOOK or HOOK@FUNCTION
    test: str      # the command that runs the row's test, or "" (no test)
    why_none: str = ""


def snapshot(case: str) -> str:
    """One case of fork_snapshot on 4 KiB pages (the variant every hook
    serves; a row costs a minute, not five), every fork asynchronous."""
    return (programs.async_fork(2, 4) + f"FORK_SNAPSHOT_EXPECT_ASYNC=1 "
            f"{SELFTESTS / 'fork_snapshot'} -r snapshot.anon_4k.{case}")


def af(case: str) -> str:
    """One case of the async_fork selftest."""
    return f"{SELFTESTS / 'async_fork'} -t {case}"


ROWS = [
    Row("write fault", "fault@__handle_mm_fault", snapshot("parent_write")),
    Row("read fault, swap-in", "fault@__handle_mm_fault", snapshot("parent_madv_pageout")),
    Row("zap: MADV_DONTNEED", "sync@zap_page_range_single", snapshot("parent_madv_dontneed")),
    Row("zap: munmap", "vma_write@vms_gather_munmap_vmas", snapshot("parent_munmap")),
    Row("zap: mremap shrink", "vma_write@vms_gather_munmap_vmas",
        snapshot("parent_mremap_shrink")),
    Row("zap: exit (the parent's own context)", "drop_mm", af("parent_exit_copies_in_own_context")),
    Row("zap: exit (exit_mmap, last reference elsewhere)", "exit_mmap", "",
        "unreachable while its drop_mm row holds: the last thread of every parent "
        "that exits or execs finishes its copies before exit_mmap(), which only "
        "ends an OOM victim's links (its own row)"),
    Row("zap: OOM reaper", "pending@__oom_reap_task_mm", af("oom_reaper_gives_up_pending_copy")),
    Row("zap: process_mrelease() of a process that is no OOM victim", "oom_victim",
        af("mrelease_by_stranger_spares_child")),
    Row("OOM: a child that finished its copy is not killed", "fail_vma_enter",
        af("oom_spares_child_that_finished_copying")),
    Row("change_protection(): mprotect", "sync@change_protection", "",
        "no caller reaches it with a mark: mprotect finishes the VMA first (the next "
        "row), NUMA hinting skips pending VMAs, uffd-wp ranges are never deferred; "
        "it guards callers to come"),
    Row("mprotect (VMA)", "vma_write@mprotect_fixup", snapshot("parent_mprotect")),
    Row("MADV_FREE", "sync@madvise_free_single_vma", snapshot("parent_madv_free")),
    Row("GUP slow: /proc/pid/mem", "gup@__get_user_pages", snapshot("parent_proc_self_mem_write")),
    Row("GUP-fast", "gup_fast", snapshot("parent_fuse_read")),
    Row("mremap move", "vma_write@move_vma", snapshot("parent_mremap_move")),
    Row("mremap grow", "vma_write", snapshot("parent_mremap_grow")),
    Row("mlock", "vma_write@mlock_fixup", snapshot("parent_mlock")),
    Row("brk/mmap next to a pending VMA", "pending",
        af("mmap_and_brk_next_to_pending_vma_do_not_wait")),
    Row("nested fork (dup_mmap write-locks every VMA)", "vma_write@copy_process",
        snapshot("parent_nested_fork")),
    Row("nested fork (a pending copy is finished first)", "begin_finish",
        af("fork_while_previous_copy_pending")),
    Row("khugepaged scan skips pending VMAs", "pending@khugepaged", "",
        "no test of its own: skipping only saves a huge page"),
    Row("MADV_COLLAPSE", "vma_write@madvise_collapse", snapshot("parent_madv_collapse")),
    Row("clear_refs", "vma_write@walk_page_range", snapshot("parent_clear_refs_soft_dirty")),
    Row("UFFDIO_MOVE source", "sync@move_pages", snapshot("parent_uffdio_move")),
    Row("HMM, migrate_vma", "sync@migrate_vma_setup", "", "no device in the guest"),
    Row("the child touches its memory first (fault)", "fault@__handle_mm_fault",
        snapshot("remote_write_into_copying_child")),
    Row("a remote change ends the child's side of a link", "vma_write",
        af("uffd_monitor_changes_child_while_copying")),
    Row("a FOLL_LONGTERM pin GUP-fast completes during dup_mmap()", "longterm_pin",
        af("longterm_pin_during_fork")),
    Row("exit of an OOM victim: the links it left end in free_pgtables()",
        "vma_write@free_pgtables", "",
        "no hook of its own: the copy was given up and every mark removed before "
        "the unmap (the OOM reaper's rows); free_pgtables() write-locks each VMA, "
        "which only detaches it, and vm_area_free() warns of a link that survives"),
    Row("secure exec and memory.async_fork", "secure_exec", af("secure_exec_ignores_cgroup_opt_in")),
    Row("cpuset rebinds policies without finishing copies", "keep_copy@mpol_rebind_mm",
        af("cpuset_move_leaves_copy_pending")),
    Row("mm_take_all_locks() does not finish copies", "keep_copy@mm_take_all_locks", "",
        "no user of it can run in the guest (KVM, VFIO, SGX)"),
]


def program(i: int, row: Row) -> harness.Program:
    """Row @i's guest program: hook off, the test, what the hook counted,
    hook on; the test's exit code is the program's."""
    off = shlex.quote(row.hook)
    cmd = (f"echo {off} > {MUTATE} && {{ {row.test}; rc=$?; "
           f"echo \"# mutate: $(cat {MUTATE})\"; echo none > {MUTATE}; exit $rc; }}")
    return harness.Program(f"row{i:02d}", 300, cmd)


def hits(output: str) -> int | None:
    """The hook's count, from the "# mutate: HOOK hits N" line."""
    for line in output.splitlines():
        if line.startswith("# mutate: ") and " hits " in line:
            try:
                return int(line.rsplit(" hits ", 1)[1])
            except ValueError:
                return None
    return None


def verdict(res: harness.ProgramResult | None, problems: list[str]) -> tuple[str, int | None]:
    """A row's verdict from its program's result (None: the row has no test)."""
    if res is None:
        return "no test", None
    if not res.ran:
        return "caught", None  # the guest died in this row
    n = hits(res.output)
    if problems and n == 0:
        # It failed, but not for the hook, which it never reached.
        return "failed, not reached", n
    if problems:
        return "caught", n
    return ("missed" if n else "not reached"), n


def run(kernel: Path, rows: list[Row], outdir: Path) -> list[dict]:
    todo = [(i, r) for i, r in enumerate(rows) if r.test]
    out: dict[int, dict] = {}
    boot = 0
    retried: set[int] = set()
    while todo:
        boot += 1
        progs = [program(i, r) for i, r in todo]
        print(f"mutate: boot {boot}: {len(progs)} rows", flush=True)
        bootdir = outdir / f"boot{boot}"
        res = harness.run_suite(kernel, progs, bootdir, memory="4G", numa_nodes=1,
                                stop_on_oops=True)
        dead = next((k for k, p in enumerate(progs) if not res.results[p.name].ran), None)
        stopped = bootdir / "stopped"
        if dead is not None and stopped.exists():
            # A row oopsed the kernel: the rows after it need a sound one.
            dead = [p.name for p in progs].index(stopped.read_text().strip())
        elif dead is not None and not (bootdir / f"{progs[dead].name}.out").exists():
            raise SystemExit(f"mutate: the guest stopped before {progs[dead].name} started "
                             f"(not a mutation's doing):\n{res.vm.describe()}")
        left = []
        for k, ((i, r), p) in enumerate(zip(todo, progs)):
            if dead is not None and k > dead:
                left.append((i, r))  # after the row that killed the guest
                continue
            result = res.results[p.name]
            v, n = verdict(result, res.problems(p.name))
            if (k == dead and stopped.exists() and v == "failed, not reached"
                    and i not in retried):
                # The oops came while the row failed without reaching its
                # hook: most likely what an earlier row left behind (a
                # child killed as this row cleaned up).  Once more.
                retried.add(i)
                left.insert(0, (i, r))
                continue
            out[i] = {"row": r.path, "hook": r.hook, "test": r.test, "verdict": v,
                      "hits": n, "boot": boot,
                      "evidence": [s.splitlines()[0] for s in res.problems(p.name)][:3]}
            print(f"mutate: {r.path}: {r.hook}: {v} (hits {n})", flush=True)
        todo = left
    for i, r in enumerate(rows):
        if not r.test:
            out[i] = {"row": r.path, "hook": r.hook, "test": None, "verdict": "no test",
                      "hits": None, "why": r.why_none}
    return [out[i] for i in sorted(out)]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = entry.parser(__doc__)
    ap.add_argument("--kernel", default=str(BUILD / "debug"),
                    help="the kernel build folder (default: build/debug, which has "
                         "CONFIG_ASYNC_FORK_DEBUG)")
    ap.add_argument("--rows", help="only the rows whose path or hook contains one of "
                    "these texts, comma-separated (default: every row)")
    ap.add_argument("--record-dir", default=str(RESULTS),
                    help="where the JSON record goes (default BUILD/results)")
    a = ap.parse_args(argv)
    kernel = Path(a.kernel)
    config = kernel / ".config"
    if not config.exists() or "CONFIG_ASYNC_FORK_DEBUG=y" not in config.read_text():
        print(f"mutate: {kernel} has no CONFIG_ASYNC_FORK_DEBUG=y: run 'make kernel-debug'",
              file=sys.stderr)
        return 2
    wanted = [w for w in (a.rows or "").split(",") if w]
    rows = [r for r in ROWS if not wanted or any(w in r.path or w in r.hook for w in wanted)]
    if not rows:
        print(f"mutate: no row matches '{a.rows}'", file=sys.stderr)
        return 2
    started = time.time()
    # What the run was built from: commits made while it runs are not.
    commit, series = harness.vm.git_describe(), results.series()
    table = run(kernel, rows, BUILD / "results/mutate")
    record = {
        **results.metadata("mutate", kernels=[results.kernel(kernel)],
                           machine_info=results.machine(cpus=2, memory="4G", numa_nodes=1),
                           argv=argv, args={"rows": a.rows}, started=started),
        "commit": commit, "series": series,
        "seconds": round(time.time() - started, 1),
        "rows": table,
        "caught": sum(r["verdict"] == "caught" for r in table),
        "gaps": [r["row"] for r in table if r["verdict"] in ("missed", "not reached")],
    }
    path = results.write(record, Path(a.record_dir), "mutate")
    print(f"mutate: {record['caught']} of {len(table)} rows caught; "
          f"gaps: {record['gaps'] or 'none'}; record {path}")
    return 1 if record["gaps"] else 0


if __name__ == "__main__":
    sys.exit(entry.run(main, "mutate"))
