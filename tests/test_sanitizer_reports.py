# SPDX-License-Identifier: GPL-2.0
"""KASAN and KCSAN reports fail a run; the boot lines of the kasan and kcsan
kernels do not.  Host-only: the reports below follow the formats of
mm/kasan/report.c (generic KASAN with CONFIG_KASAN_EXTRA_INFO) and
kernel/kcsan/report.c in 6.12, as the serial console shows them."""

from pathlib import Path

import pytest

from asyncfork import suite
from asyncfork import vm

KASAN_UAF = """\
[  812.406113] ==================================================================
[  812.407220] BUG: KASAN: slab-use-after-free in af_sync+0x2c1/0x3a0
[  812.408019] Read of size 8 at addr ffff888012a4c818 by task fork_stress/1873
[  812.408741]
[  812.409107] CPU: 1 UID: 0 PID: 1873 Comm: fork_stress Not tainted 6.12.117-asyncfork-kasan #1
[  812.409963] Hardware name: QEMU Standard PC (i440FX + PIIX, 1996), BIOS 1.16.2-debian-1.16.2-1 04/01/2014
[  812.410872] Call Trace:
[  812.411201]  <TASK>
[  812.411480]  dump_stack_lvl+0x64/0x80
[  812.412019]  print_report+0xc4/0x640
[  812.412533]  ? af_sync+0x2c1/0x3a0
[  812.413012]  kasan_report+0xb4/0xf0
[  812.413490]  ? af_sync+0x2c1/0x3a0
[  812.413962]  af_sync+0x2c1/0x3a0
[  812.414424]  __async_fork_sync_range+0x15e/0x220
[  812.415013]  do_wp_page+0x9a7/0x1ba0
[  812.415511]  __handle_mm_fault+0x1b3e/0x2a30
[  812.416052]  handle_mm_fault+0x2a1/0x7c0
[  812.416566]  do_user_addr_fault+0x2f4/0xa10
[  812.417097]  exc_page_fault+0x6a/0x130
[  812.417593]  asm_exc_page_fault+0x26/0x30
[  812.418106] RIP: 0033:0x401c3e
[  812.418532] Code: 48 8b 45 f0 48 89 10 48 83 45 f0 08 48 8b 45 f0 48 3b 45 e8 72 e5 90 90 c9 c3 55 48 89 e5 48 83 ec 20 48 89 7d e8 48 89 75 e0 <48> c7 45 f8 00 00 00 00 eb 2a 48 8b 45 f8 48 8d 14 c5 00 00 00 00
[  812.420401] RSP: 002b:00007f3a8e7fbe40 EFLAGS: 00010206
[  812.421003] RAX: 00007f3a7d600000 RBX: 0000000000000000 RCX: 0000000000000200
[  812.421790]  </TASK>
[  812.422063]
[  812.422314] Allocated by task 1861 on cpu 0 at 811.902114s:
[  812.422955]  kasan_save_stack+0x33/0x60
[  812.423462]  kasan_save_track+0x14/0x30
[  812.423969]  __kasan_kmalloc+0xaa/0xb0
[  812.424470]  __kmalloc_node_noprof+0x1f5/0x4b0
[  812.425042]  __kvmalloc_node_noprof+0x72/0x190
[  812.425612]  async_fork_begin+0x1c4/0x520
[  812.426142]  dup_mmap+0x3c1/0x11e0
[  812.426617]  copy_process+0x3a52/0x6a40
[  812.427127]  kernel_clone+0xef/0x6c0
[  812.427613]  __do_sys_clone+0xba/0x100
[  812.428111]  do_syscall_64+0x9e/0x1a0
[  812.428602]  entry_SYSCALL_64_after_hwframe+0x77/0x7f
[  812.429226]
[  812.429474] Freed by task 1902 on cpu 1 at 812.398777s:
[  812.430089]  kasan_save_stack+0x33/0x60
[  812.430598]  kasan_save_track+0x14/0x30
[  812.431104]  kasan_save_free_info+0x3b/0x60
[  812.431640]  __kasan_slab_free+0x51/0x70
[  812.432155]  kfree+0x13f/0x3f0
[  812.432608]  af_ctx_put+0xb2/0x140
[  812.433085]  async_fork_exit_mmap+0x1a3/0x2b0
[  812.433651]  exit_mmap+0xf6/0x6a0
[  812.434123]  __mmput+0x73/0x2e0
[  812.434586]  do_exit+0x6f4/0x1670
[  812.435056]  do_group_exit+0xb0/0x230
[  812.435550]  get_signal+0x1473/0x1520
[  812.436044]  arch_do_signal_or_restart+0x80/0x3a0
[  812.436628]  syscall_exit_to_user_mode+0x1c0/0x280
[  812.437217]  do_syscall_64+0xab/0x1a0
[  812.437709]  entry_SYSCALL_64_after_hwframe+0x77/0x7f
[  812.438330]
[  812.438580] The buggy address belongs to the object at ffff888012a4c800
[  812.438580]  which belongs to the cache kmalloc-512 of size 512
[  812.439937] The buggy address is located 24 bytes inside of
[  812.439937]  freed 512-byte region [ffff888012a4c800, ffff888012a4ca00)
[  812.441301]
[  812.441551] The buggy address belongs to the physical page:
[  812.442190] page: refcount:1 mapcount:0 mapping:0000000000000000 index:0x0 pfn:0x12a4c
[  812.443063] head: order:2 mapcount:0 entire_mapcount:0 nr_pages_mapped:0 pincount:0
[  812.443918] flags: 0x100000000000040(head|node=0|zone=1)
[  812.444536] page_type: f5(slab)
[  812.444985] raw: 0100000000000040 ffff888001042c80 dead000000000122 0000000000000000
[  812.445823] raw: 0000000000000000 0000000080100010 00000001f5000000 0000000000000000
[  812.446661] page dumped because: kasan: bad access detected
[  812.447290]
[  812.447540] Memory state around the buggy address:
[  812.448113]  ffff888012a4c700: fc fc fc fc fc fc fc fc fc fc fc fc fc fc fc fc
[  812.448911]  ffff888012a4c780: fc fc fc fc fc fc fc fc fc fc fc fc fc fc fc fc
[  812.449709] >ffff888012a4c800: fa fb fb fb fb fb fb fb fb fb fb fb fb fb fb fb
[  812.450505]                             ^
[  812.451033]  ffff888012a4c880: fb fb fb fb fb fb fb fb fb fb fb fb fb fb fb fb
[  812.451831]  ffff888012a4c900: fb fb fb fb fb fb fb fb fb fb fb fb fb fb fb fb
[  812.452629] ==================================================================
[  812.453418] Disabling lock debugging due to kernel taint
"""

KCSAN_RACE = """\
[  301.552871] ==================================================================
[  301.553902] BUG: KCSAN: data-race in af_copy_chunks / af_copy_pmd
[  301.554702]
[  301.554961] write to 0xffff888009c2e148 of 8 bytes by task 1204 on cpu 0:
[  301.555732]  af_copy_pmd+0x2b7/0x3d0
[  301.556214]  af_copy_tables+0x10d/0x1e0
[  301.556718]  af_sync+0x191/0x270
[  301.557181]  __async_fork_sync_range+0xd4/0x150
[  301.557762]  do_wp_page+0x5b1/0x1040
[  301.558256]  __handle_mm_fault+0xe28/0x1850
[  301.558794]  handle_mm_fault+0x1a2/0x4d0
[  301.559306]  do_user_addr_fault+0x22c/0x8c0
[  301.559844]  exc_page_fault+0x5b/0xf0
[  301.560339]  asm_exc_page_fault+0x26/0x30
[  301.560855]
[  301.561110] read to 0xffff888009c2e148 of 8 bytes by task 1219 on cpu 1:
[  301.561873]  af_copy_chunks+0x8e/0x230
[  301.562374]  af_child_copy+0x14c/0x300
[  301.562874]  af_child_work+0x4a/0x90
[  301.563361]  task_work_run+0xd3/0x140
[  301.563858]  syscall_exit_to_user_mode+0x1b5/0x1c0
[  301.564451]  ret_from_fork+0x2e/0x50
[  301.564937]  ret_from_fork_asm+0x1a/0x30
[  301.565449]
[  301.565703] value changed: 0x0000000000000011 -> 0x0000000000000010
[  301.566437]
[  301.566689] Reported by Kernel Concurrency Sanitizer on:
[  301.567311] CPU: 1 UID: 0 PID: 1219 Comm: fork_snapshot Not tainted 6.12.117-asyncfork-kcsan #1
[  301.568193] Hardware name: QEMU Standard PC (i440FX + PIIX, 1996), BIOS 1.16.2-debian-1.16.2-1 04/01/2014
[  301.569114] ==================================================================
"""

# A race where only one access was seen (KCSAN_REPORT_RACE_UNKNOWN_ORIGIN).
KCSAN_UNKNOWN = """\
[  402.100101] ==================================================================
[  402.100902] BUG: KCSAN: data-race in af_failed+0x1c/0x40
[  402.101600]
[  402.101861] race at unknown origin, with read to 0xffff88800b1d0010 of 8 bytes by task 1333 on cpu 0:
[  402.102800]  af_failed+0x1c/0x40
[  402.103270]  af_child_detach+0x33/0x90
[  402.103770]
[  402.104020] value changed: 0x0000000000000000 -> 0x0000000000000001
[  402.104760]
[  402.105011] Reported by Kernel Concurrency Sanitizer on:
[  402.105633] CPU: 0 UID: 0 PID: 1333 Comm: async_fork Not tainted 6.12.117-asyncfork-kcsan #1
[  402.106500] ==================================================================
"""

# A wild pointer under KASAN: the oops line and KASAN's decoding of it.
KASAN_GPF = """\
[   95.201004] Oops: general protection fault, probably for non-canonical address 0xdffffc0000000003: 0000 [#1] PREEMPT SMP KASAN NOPTI
[   95.202391] KASAN: null-ptr-deref in range [0x0000000000000018-0x000000000000001f]
[   95.203210] CPU: 0 UID: 0 PID: 1502 Comm: fork_stress Not tainted 6.12.117-asyncfork-kasan #1
[   95.204013] RIP: 0010:af_copy_pmd+0x7d/0x3d0
"""

# What the kasan and kcsan kernels print at every boot: not reports.
BOOT = """\
[    0.000000] Linux version 6.12.117-asyncfork-kasan (async-fork@guest) (gcc (Debian 12.2.0-14+deb12u1) 12.2.0) #1 SMP PREEMPT_VOLUNTARY
[    0.000000] Command line: earlyprintk=serial,ttyS0,115200 console=ttyS0 panic=-1 kasan.fault=report
[    0.412306] kasan: KernelAddressSanitizer initialized
[    0.418811] stackdepot: allocating hash table via alloc_large_system_hash
[    0.601551] kcsan: enabled early
[    0.601902] kcsan: non-strict mode configured - use CONFIG_KCSAN_STRICT=y to see all data races
[    0.923417] kfence: initialized - using 2097152 bytes for 255 objects at 0x(____ptrval____)-0x(____ptrval____)
[    1.100000] page_table_check: enabled
[    2.305518] kcsan: selftest: 3/3 tests passed
[    2.406001] Run /init as init process
"""


@pytest.mark.parametrize("text,first", [
    (KASAN_UAF, "BUG: KASAN: slab-use-after-free in af_sync+0x2c1/0x3a0"),
    (KCSAN_RACE, "BUG: KCSAN: data-race in af_copy_chunks / af_copy_pmd"),
    (KCSAN_UNKNOWN, "BUG: KCSAN: data-race in af_failed+0x1c/0x40"),
    (KASAN_GPF, "Oops: general protection fault, probably for non-canonical address"),
])
def test_sanitizer_report_is_one_report(text, first):
    reps = vm.kernel_reports(BOOT + text)
    assert len(reps) == 1, reps
    assert reps[0].startswith(first), reps[0]


def test_report_excerpt_names_the_access():
    rep, = vm.kernel_reports(KASAN_UAF)
    assert "Read of size 8 at addr ffff888012a4c818 by task fork_stress/1873" in rep
    rep, = vm.kernel_reports(KCSAN_RACE)
    assert "write to 0xffff888009c2e148 of 8 bytes by task 1204 on cpu 0:" in rep


def test_distant_reports_count_each():
    gap = "".join(f"[  500.{i:06d}] loop0: progress line {i}\n" for i in range(40))
    assert len(vm.kernel_reports(KCSAN_RACE + gap + KCSAN_UNKNOWN + gap + KASAN_UAF)) == 3


def test_back_to_back_reports_count_each():
    assert len(vm.kernel_reports(BOOT + KCSAN_RACE + KCSAN_UNKNOWN + KASAN_UAF)) == 3


def test_sanitizer_patterns_are_needed():
    # The KCSAN pattern is what catches a report line even without its "BUG: "
    # (as a grep of the console for the sanitizers' names would).
    assert vm.REPORT_RE.search("KCSAN: data-race in a / b")
    assert vm.REPORT_RE.search("KASAN: null-ptr-deref in range [0x18-0x1f]")


def test_sanitizer_boot_lines_are_not_reports():
    assert vm.kernel_reports(BOOT) == []


@pytest.mark.parametrize("text", [KASAN_UAF, KCSAN_RACE])
def test_report_fails_the_program(text):
    """A program that exited 0 with passing KTAP still fails when its
    kernel log has a sanitizer report, and the report is in the evidence."""
    p = suite.Program("fork_snapshot", 600, "true")
    out = "TAP version 13\n1..1\nok 1 snapshot exact\n"
    r = suite.ProgramResult(p, True, 0, out, BOOT + text, 30.0, suite.parse_ktap(out))
    run = suite.SuiteRun({p.name: r}, vm.VMResult(0, False, 40.0, BOOT + text,
                                                    Path("/dev/null"),
                                                    vm.kernel_reports(BOOT + text)),
                           Path("/nonexistent"), "6.12.117-asyncfork-kasan", BOOT)
    problems = run.problems(p.name)
    assert any(s.startswith("kernel report while fork_snapshot ran:\nBUG: K") for s in problems), \
        problems
    assert not run.vm.ok
