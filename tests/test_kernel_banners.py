# SPDX-License-Identifier: GPL-2.0
"""Every report banner of lockdep, RCU, the hung-task and lockup detectors
fails a run; the lines around them that are no report do not.  Host-only.

Each banner is the text the 6.12 tree prints (linux-source-6.12: the file
named with it), with the serial console's "[  seconds]" timestamps, and
for the ones the issue named (issue 30: "Verdicts that miss nothing") the
lines that follow it as printed.  Before these patterns, the scanner
looked for lockdep's banners of older kernels ("INFO: inconsistent lock
state") and missed every banner marked "missed" below.
"""

import re

import pytest

from asyncfork import vm

RELEASE = "6.12.117-asyncfork-debug #1 Not tainted"


def console(lines: list[str], start: float = 412.301234) -> str:
    """@lines as the console prints them, each with its timestamp."""
    return "".join(f"[{start + i * 0.000731:12.6f}] {line}\n" for i, line in enumerate(lines))


def lockdep_banner(banner: str, body: list[str]) -> str:
    """A lockdep report: a blank line, "=" as long as the banner, the
    banner, print_kernel_ident(), "-" as long, then @body (lockdep.c)."""
    return console(["", "=" * len(banner), banner, RELEASE, "-" * len(banner)] + body +
                   ["", "stack backtrace:",
                    "CPU: 1 UID: 0 PID: 1873 Comm: fork_stress Not tainted "
                    "6.12.117-asyncfork-debug #1",
                    "Call Trace:", " <TASK>", " dump_stack_lvl+0x64/0x80", " </TASK>"])


# kernel/locking/lockdep.c print_usage_bug(): missed.
INCONSISTENT = lockdep_banner("WARNING: inconsistent lock state", [
    "inconsistent {IN-SOFTIRQ-W} -> {SOFTIRQ-ON-W} usage.",
    "fork_stress/1873 [HC0[0]:SC0[0]:HE1:SE1] takes:",
    "ffff888012a4c818 (&ctx->lock){+.?.}-{2:2}, at: af_sync+0x2c1/0x3a0",
    "{IN-SOFTIRQ-W} state was registered at:",
    "  lock_acquire+0xd5/0x2a0",
    "  _raw_spin_lock+0x30/0x40",
    "  af_child_work+0x4a/0x90",
    "irq event stamp: 1204",
    "hardirqs last  enabled at (1203): [<ffffffff81e0a1c5>] _raw_spin_unlock_irq+0x25/0x40",
    "",
    "other info that might help us debug this:",
    " Possible unsafe locking scenario:",
    "",
    "       CPU0",
    "       ----",
    "  lock(&ctx->lock);",
    "  <Interrupt>",
    "    lock(&ctx->lock);",
    "",
    " *** DEADLOCK ***",
    "",
    "1 lock held by fork_stress/1873:",
    " #0: ffff888012a4c818 (&ctx->lock){+.?.}-{2:2}, at: af_sync+0x2c1/0x3a0",
])

# kernel/locking/lockdep.c lockdep_rcu_suspicious(), called by
# RCU_LOCKDEP_WARN() (include/linux/rcupdate.h): missed.
SUSPICIOUS_RCU = lockdep_banner("WARNING: suspicious RCU usage", [
    "mm/async_fork.c:412 suspicious rcu_dereference_check() usage!",
    "",
    "other info that might help us debug this:",
    "",
    "",
    "rcu_scheduler_active = 2, debug_locks = 1",
    "no locks held by fork_stress/1873.",
])

# kernel/locking/lockdep.c print_circular_bug_header(): caught before too.
CIRCULAR = lockdep_banner("WARNING: possible circular locking dependency detected", [
    "fork_stress/1873 is trying to acquire lock:",
    "ffff888012a4c818 (&mm->mmap_lock){++++}-{4:4}, at: af_sync+0x2c1/0x3a0",
    "",
    "but task is already holding lock:",
    "ffff888009c2e148 (&ctx->lock){+.+.}-{2:2}, at: af_copy_pmd+0x2b7/0x3d0",
    "",
    "which lock already depends on the new lock.",
])

# kernel/hung_task.c check_hung_task(): caught before too.
HUNG_TASK = console([
    "INFO: task fork_stress:1873 blocked for more than 122 seconds.",
    "      Not tainted 6.12.117-asyncfork-debug #1",
    '"echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.',
    "task:fork_stress     state:D stack:0     pid:1873  tgid:1873  ppid:1861   flags:0x00004002",
    "Call Trace:",
    " <TASK>",
    " __schedule+0x5a1/0x1560",
    " schedule+0x3e/0x140",
    " </TASK>",
    "",
    "Showing all locks held in the system:",
    "1 lock held by khungtaskd/33:",
], start=250.104411)

# kernel/rcu/tree_stall.h print_other_cpu_stall(), "rcu: " from tree.c:
# caught before too.
RCU_STALL = console([
    "rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:",
    "rcu: \t1-....: (21001 ticks this GP) idle=f3c4/1/0x4000000000000000 "
    "softirq=2911/2911 fqs=5199",
    "rcu: \t(detected by 0, t=21002 jiffies, g=10213, q=421 ncpus=3)",
    "Sending NMI from CPU 0 to CPUs 1:",
    "NMI backtrace for cpu 1",
    "CPU: 1 UID: 0 PID: 1873 Comm: fork_stress Not tainted 6.12.117-asyncfork-debug #1",
], start=180.556001)

# kernel/rcu/tree_stall.h print_cpu_stall(): missed.
RCU_SELF_STALL = console([
    "rcu: INFO: rcu_preempt self-detected stall on CPU",
    "rcu: \t1-....: (21000 ticks this GP) idle=f3c4/1/0x4000000000000000 "
    "softirq=2911/2911 fqs=5199",
    "rcu: \t(t=21001 jiffies g=10213 q=421 ncpus=3)",
    "CPU: 1 UID: 0 PID: 1873 Comm: fork_stress Not tainted 6.12.117-asyncfork-debug #1",
], start=180.556001)

# kernel/watchdog.c watchdog_timer_fn(), "watchdog: " from its pr_fmt:
# caught before too.
SOFT_LOCKUP = console([
    "watchdog: BUG: soft lockup - CPU#1 stuck for 22s! [fork_stress:1873]",
    "CPU#1 Utilization every 4s during lockup:",
    "\t#1: 100% system,\t  0% softirq,\t  0% hardirq,\t  0% idle",
    "Modules linked in:",
    "irq event stamp: 3107",
    "CPU: 1 UID: 0 PID: 1873 Comm: fork_stress Not tainted 6.12.117-asyncfork-debug #1",
    "RIP: 0010:af_copy_pmd+0x7d/0x3d0",
], start=95.004112)

# The banner lines of the other reports, each as its source prints it,
# with its source and whether the scanner caught it before.
BANNERS = [
    ("kernel/locking/lockdep.c print_bad_irq_dependency(), caught",
     lockdep_banner("WARNING: SOFTIRQ-safe -> SOFTIRQ-unsafe lock order detected", [])),
    ("kernel/locking/lockdep.c print_deadlock_bug(), caught",
     lockdep_banner("WARNING: possible recursive locking detected", [])),
    ("kernel/locking/lockdep.c print_collision(): missed",
     lockdep_banner("WARNING: chain_key collision", [
         "fork_stress/1873: Hash chain already cached but the contents don't match!"])),
    ("kernel/locking/lockdep.c print_irq_inversion_bug(), caught",
     lockdep_banner("WARNING: possible irq lock inversion dependency detected", [])),
    ("kernel/locking/lockdep.c print_lock_nested_lock_not_held(): missed",
     lockdep_banner("WARNING: Nested lock was not taken", [
         "fork_stress/1873 is trying to lock:"])),
    ("kernel/locking/lockdep.c print_unlock_imbalance_bug(), caught",
     lockdep_banner("WARNING: bad unlock balance detected!", [])),
    ("kernel/locking/lockdep.c print_lock_contention_bug(): missed",
     lockdep_banner("WARNING: bad contention detected!", [
         "fork_stress/1873 is trying to contend lock (&ctx->lock) at:",
         "but there are no locks held!"])),
    ("kernel/locking/lockdep.c print_freed_lock_bug(): missed",
     lockdep_banner("WARNING: held lock freed!", [
         "fork_stress/1873 is freeing memory ffff888012a4c800-ffff888012a4c9ff, "
         "with a lock still held there!"])),
    ("kernel/locking/lockdep.c print_held_locks_bug(), caught",
     console(["", "=" * 36, "WARNING: fork_stress/1873 still has locks held!", RELEASE])),
    ("kernel/locking/lockdep.c lockdep_sys_exit(), caught",
     lockdep_banner("WARNING: lock held when returning to user space!", [
         "fork_stress/1873 is leaving the kernel with locks still held!"])),
    ("kernel/locking/lockdep.c print_lock_invalid_wait_context(), caught",
     console(["", "=" * 29, "[ BUG: Invalid wait context ]", RELEASE, "-" * 29,
              "fork_stress/1873 is trying to lock:"])),
    ("kernel/locking/lockdep.c assign_lock_key(): missed",
     console(["INFO: trying to register non-static key.",
              "The code is fine but needs lockdep annotation, or maybe",
              "you didn't initialize this object before use?",
              "turning off the locking correctness validator."])),
    ("kernel/locking/lockdep.c print_lockdep_off(), caught",
     console(["BUG: MAX_LOCKDEP_CHAIN_HLOCKS too low!",
              "turning off the locking correctness validator."])),
    ("kernel/rcu/tree_stall.h print_other_cpu_stall(), CSD-lock: missed",
     console(["rcu: INFO: rcu_preempt detected stall, but suppressed full report "
              "due to a stuck CSD-lock."])),
    ("kernel/rcu/tree_exp.h synchronize_rcu_expedited_stall(): missed",
     console(["rcu: INFO: rcu_preempt detected expedited stalls on CPUs/tasks: "
              "{ 1-.... } 21003 jiffies s: 129 root: 0x2/."])),
    ("kernel/rcu/tasks.h check_holdout_task(): missed",
     console(["INFO: rcu_tasks detected stalls on tasks:",
              "0000000064d5fc3a: .. nvcsw: 2/2 holdout: 1 idle_cpu: -1/1"])),
    ("kernel/rcu/tasks.h show_stalled_task_trace(): missed",
     console(["INFO: rcu_tasks_trace detected stalls on tasks:"])),
    ("kernel/rcu/tree.c __call_rcu_common(): missed",
     console(["rcu: __call_rcu_common(): Double-freed CB 00000000c5a1f3e2->"
              "af_ctx_free_rcu+0x0/0x40()!!!   slab kmalloc-512 start ffff888012a4c800 "
              "pointer offset 24 size 512"])),
    ("kernel/watchdog.c watchdog_hardlockup_check(): missed",
     console(["watchdog: Watchdog detected hard LOCKUP on cpu 1",
              "Modules linked in:"])),
    ("kernel/sched/core.c __might_resched(), caught",
     console(["BUG: sleeping function called from invalid context at mm/memory.c:6221",
              "in_atomic(): 1, irqs_disabled(): 0, non_block: 0, pid: 1873, name: fork_stress"])),
    ("mm/slub.c __slab_bug(): missed",
     console(["=" * 77, "BUG kmalloc-512 (Not tainted): Poison overwritten", "-" * 77, "",
              "0xffff888012a4c818-0xffff888012a4c81f @offset=24. First byte 0x0 instead of 0x6b"])),
    # mm's own reports, which 6.12 opens with "BUG: " (the scanner had a
    # pattern each for them before, now covered by "BUG: ").
    ("mm/page_alloc.c bad_page(), caught",
     console(["BUG: Bad page state in process fork_stress  pfn:12a4c",
              "page: refcount:0 mapcount:1 mapping:0000000000000000 index:0x7f3a7d600 pfn:0x12a4c"])),
    ("mm/memory.c print_bad_pte(), caught",
     console(["BUG: Bad page map in process fork_stress  pte:8000000012a4c867 pmd:09c2e067"])),
    ("kernel/fork.c check_mm(), caught",
     console(["BUG: Bad rss-counter state mm:00000000b5ad3c1e type:MM_ANONPAGES val:-512"])),
    ("mm/page_table_check.c BUG_ON() via lib/bug.c, caught",
     console(["------------[ cut here ]------------",
              "kernel BUG at mm/page_table_check.c:87!",
              "Oops: invalid opcode: 0000 [#1] PREEMPT SMP NOPTI"])),
    ("arch/arm64/mm/fault.c die_kernel_fault(), arch/arm64/kernel/traps.c die(): caught",
     console(["Unable to handle kernel paging request at virtual address dead000000000108",
              "Mem abort info:",
              "Internal error: Oops: 0000000096000044 [#1] PREEMPT SMP"])),
    ("arch/arm64/kernel/traps.c die() of a BUG(): caught",
     console(["kernel BUG at mm/async_fork.c:512!",
              "Internal error: Oops - BUG: 00000000f2000800 [#1] PREEMPT SMP"])),
]


@pytest.mark.parametrize("text,first", [
    (INCONSISTENT, "WARNING: inconsistent lock state"),
    (SUSPICIOUS_RCU, "WARNING: suspicious RCU usage"),
    (CIRCULAR, "WARNING: possible circular locking dependency detected"),
    (HUNG_TASK, "INFO: task fork_stress:1873 blocked for more than 122 seconds."),
    (RCU_STALL, "rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:"),
    (RCU_SELF_STALL, "rcu: INFO: rcu_preempt self-detected stall on CPU"),
    (SOFT_LOCKUP, "watchdog: BUG: soft lockup - CPU#1 stuck for 22s! [fork_stress:1873]"),
], ids=["inconsistent", "suspicious-rcu", "circular", "hung-task", "rcu-stall",
        "rcu-self-stall", "soft-lockup"])
def test_report_is_one_report_with_its_details(text, first):
    reps = vm.kernel_reports(text)
    assert len(reps) == 1, reps
    assert reps[0].splitlines()[0] == first, reps[0]
    # The excerpt carries what follows the banner: the task, the lock.
    assert "fork_stress" in reps[0], reps[0]


@pytest.mark.parametrize("source,text", BANNERS, ids=[re.sub(r"\W", "", s.split(" ")[1]) for s, _ in BANNERS])
def test_banner_is_reported(source, text):
    reps = vm.kernel_reports(text)
    assert len(reps) == 1, (source, reps)


def test_back_to_back_lockdep_reports_count_each():
    """lockdep's "=" lines above a banner are as long as the banner, 25
    characters and up: each starts a report of its own."""
    texts = [INCONSISTENT, SUSPICIOUS_RCU, CIRCULAR] + [
        t for s, t in BANNERS if s.startswith("kernel/locking/lockdep.c") and "] " + "=" * 25 in t]
    assert len(texts) == 14
    assert len(vm.kernel_reports("".join(texts))) == len(texts)


def test_distant_reports_count_each():
    gap = console([f"loop0: progress line {i}" for i in range(40)], start=500.0)
    texts = [HUNG_TASK, RCU_STALL, RCU_SELF_STALL, SOFT_LOCKUP]
    assert len(vm.kernel_reports(gap.join(texts))) == len(texts)


def test_every_pattern_has_a_banner():
    """No pattern of the list is dead: each matches a banner above or of
    tests/test_sanitizer_reports.py and test_harness.py's excerpts."""
    samples = [INCONSISTENT, SUSPICIOUS_RCU, CIRCULAR, HUNG_TASK, RCU_STALL, RCU_SELF_STALL,
               SOFT_LOCKUP] + [t for _, t in BANNERS] + [
        "------------[ cut here ]------------",
        "WARNING: CPU: 0 PID: 1 at mm/memory.c:1 f+0x1/0x2",
        "Oops: general protection fault, probably for non-canonical address 0xdffffc0000000003",
        "Kernel panic - not syncing: hung_task: blocked tasks",
        "KASAN: null-ptr-deref in range [0x0000000000000018-0x000000000000001f]",
        "KCSAN: data-race in a / b",
        "KFENCE: use-after-free read in af_sync+0x2c1/0x3a0",
        "UBSAN: array-index-out-of-bounds in mm/async_fork.c:212:9",
        "Out of memory: Killed process 1873 (fork_stress) total-vm:2101248kB",
    ]
    lines = [vm.TIMESTAMP_RE.sub("", line) for t in samples for line in t.splitlines()]
    for p in vm.REPORT_PATTERNS:
        assert any(re.match(p, line) for line in lines), f"no banner for pattern {p!r}"


# Lines a debug kernel prints in a passing run, with the same words as a
# report: its boot, the tests' own memory cgroups and injected allocation
# failures, a user program's crash, the harness's markers, and a program's
# output on the console that quotes a banner.
HARMLESS = console([
    "Lock dependency validator: Copyright (c) 2006 Red Hat, Inc., Ingo Molnar",
    "... MAX_LOCKDEP_SUBCLASSES:  8",
    "rcu: Preemptible hierarchical RCU implementation.",
    "rcu: \tRCU lockdep checking is enabled.",
    "\tRCU CPU stall warnings timeout set to 21 (rcu_cpu_stall_timeout).",
    "rcu: RCU calculated value of scheduler-enlistment delay is 25 jiffies.",
    "NMI watchdog: Perf NMI watchdog permanently disabled",
    "watchdog: Disabling watchdog on nohz_full cores by default",
    "INFO: lockdep is turned off.",
    "Showing all locks held in the system:",
    "run-suite: fork_stress_faults (run 1)",
    "lkdtm: Performing direct entry WARNING",
    "FAULT_INJECTION: forcing a failure.",
    "name fail_page_alloc, interval 1, probability 10, space 0, times -1",
    "fork_stress: page allocation failure: order:0, mode:0xcc0(GFP_KERNEL), "
    "nodemask=(null),cpuset=/,mems_allowed=0-1",
    "Memory cgroup out of memory: Killed process 1873 (fork_stress) total-vm:2101248kB, "
    "anon-rss:40960kB, file-rss:1024kB, shmem-rss:0kB, UID:0 pgtables:120kB oom_score_adj:0",
    "oom_reaper: reaped process 1873 (fork_stress), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB",
    "traps: stress-ng[2211] general protection fault ip:7f3a8e7fbe40 sp:7ffd1c2e0a10 "
    "error:0 in libc.so.6[7f3a8e600000+155000]",
    "fork_stress[1902]: segfault at 0 ip 0000000000401c3e sp 00007f3a8e7fbe40 error 4",
    "# WARNING: inconsistent lock state (quoted by a test's diagnostic)",
    "ok 3 af.oom_kills_child_while_copying",
], start=1.5)


def test_harmless_lines_are_no_reports():
    assert vm.kernel_reports(HARMLESS) == []


def test_program_output_without_newline_keeps_the_report():
    """A kernel line that the console appends to a program's unfinished
    output line still starts a report, and a quoted banner does not."""
    text = ("progress: BUG: not a kernel line\n"
            "progress: 10 of 20[  412.301236] WARNING: inconsistent lock state\n")
    reps = vm.kernel_reports(text)
    assert len(reps) == 1 and reps[0].startswith("WARNING: inconsistent lock state"), reps


# What test_harness.py's guest test provokes (echo WARNING >
# /sys/kernel/debug/provoke-crash/DIRECT): drivers/misc/lkdtm/core.c's line,
# then lkdtm_WARNING()'s WARN_ON() (drivers/misc/lkdtm/bugs.c, kernel/panic.c).
LKDTM_WARNING = console([
    "run-suite: inject_warn (run 1)",
    "lkdtm: Performing direct entry WARNING",
    "------------[ cut here ]------------",
    "WARNING: CPU: 1 PID: 231 at drivers/misc/lkdtm/bugs.c:112 lkdtm_WARNING+0x12/0x20",
    "Modules linked in:",
    "CPU: 1 UID: 0 PID: 231 Comm: bash Not tainted 6.12.117-asyncfork-debug #1",
    "RIP: 0010:lkdtm_WARNING+0x12/0x20",
    "---[ end trace 0000000000000000 ]---",
], start=31.200101)


def test_injected_lkdtm_warning_is_one_report_naming_lkdtm():
    """The deliberate WARN of test_injected_warn_fails_the_program is still
    found, with the evidence that test asserts ("WARNING", "lkdtm")."""
    rep, = vm.kernel_reports(LKDTM_WARNING)
    assert rep.startswith("------------[ cut here ]------------\nWARNING: CPU: 1 PID: 231 at ")
    assert "lkdtm" in rep.lower()
