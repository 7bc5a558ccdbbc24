// SPDX-License-Identifier: GPL-2.0
/*
 * Async-fork: fork() without the wait for the page-table copy.
 *
 * fork() copies the page tables of the parent, and the parent is stopped
 * for as long as that takes: tens of milliseconds per GB, which is what the
 * clients of an in-memory database that snapshots by fork() feel.  With
 * Async-fork, fork() does everything it does today except the copy of the
 * PTE tables of private anonymous memory: it copies the upper levels, and
 * for each PMD that lies entirely inside such a VMA and points to a PTE
 * table it clears the RW bit of the parent's PMD entry (the "mark") instead
 * of copying the table.  The parent returns at once.  The child copies the
 * marked tables, exactly as copy_pte_range() would have at fork (COW,
 * anon-exclusive and pinned pages, swap and migration entries, rss), before
 * it first runs user code, and clears each mark when its table is copied.
 *
 * Meanwhile the parent must not change what the child has still to copy.
 * Its own writes fault on the mark; the fault handler, and every other path
 * that changes the parent's PTEs or depends on them, first copies the table
 * to the child itself ("synchronization", async_fork_sync_range()).  Paths
 * that change a VMA go through vma_start_write(), which finishes the copy of
 * that VMA.  The child, in turn, copies a table on demand if something
 * touches its memory before its copy is done (a signal frame, ptrace).
 *
 * The child may share its copy with helper threads
 * (vm.async_fork_copy_threads): the tables are split into chunks of
 * AF_BATCH, handed out in address order to whichever thread asks next, and
 * the child waits for its helpers before it lets go of its links.  The
 * helpers are user workers of the child, as io_uring's and vhost's are of
 * their owners: threads of its process that never run user code, so that
 * their CPU time, their placement and their number are the child's, under
 * its cgroups (cpu.max, cpuset, pids.max) and rlimits.
 *
 * Lock rule
 *
 * A mark is set only by fork(), under the parent's mmap_lock held for
 * writing and with the VMA write-locked.  The VMA and its copy in the child
 * are joined by a link.  Each table has a lock: one of the fork's
 * AF_NR_LOCKS mutexes, chosen by the table's address (af_lock()).  It
 * serializes everything that removes the table's mark: whoever holds it and
 * still sees the mark copies the table (or, once the fork has failed, only
 * removes the mark); nobody else changes a marked entry, except the CPU
 * setting its Accessed bit.  So parent and child never copy a table twice,
 * copiers of neighbouring tables do not wait for each other, and a parent
 * about to change a table waits at most for one table's copy by a copier
 * that happens to hold the same lock.
 *
 * A copier looks at a link's VMAs only while it is counted in
 * link->copiers, and only after it has seen marks left on the link
 * (af_enter()).  Both VMAs of the link and their page tables stay until
 * such a copier leaves: whoever ends a link (the parent before it changes
 * the VMA or exits, the child before its mm goes away:
 * async_fork_vma_write()) removes its last marks, then waits for the
 * link's copiers, each of which is copying one table at most.
 *
 * Lock order: mmap_lock or VMA lock (of either mm) -> a table lock -> the
 * PTE locks of the child, then of the parent (copy_pte_range()).  A task
 * holds at most one table lock, and takes no mmap_lock under it.
 *
 * From the end of fork() until its last table is copied, the parent's
 * write_protect_seq stays held for writing, as it is while fork() copies
 * page tables: GUP-fast pins in the parent take the slow path meanwhile,
 * and the copies run with the seqcount held as folio_try_dup_anon_rmap_*()
 * requires.  Its writers stay serialized because a parent has at most one
 * fork in progress: a fork() that finds the seqcount odd finishes the
 * previous one before it copies anything (async_fork_begin()).  Links of a
 * finished copy stay on the parent's VMAs until vma_start_write(), which
 * dup_mmap() calls on every VMA before copying it.
 */

#include <linux/async_fork.h>
#include <linux/completion.h>
#include <linux/kcsan-checks.h>
#include <linux/memcontrol.h>
#include <linux/mm.h>
#include <linux/mmu_notifier.h>
#include <linux/mutex.h>
#include <linux/oom.h>
#include <linux/pid.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/sched/task.h>
#include <linux/slab.h>
#include <linux/sysctl.h>
#include <linux/task_work.h>
#include <linux/userfaultfd_k.h>
#include <linux/vmstat.h>
#include <linux/wait_bit.h>

#define CREATE_TRACE_POINTS
#include <trace/events/async_fork.h>

#include "internal.h"

/* Tables handed to one of the child's copiers at a time: one "chunk". */
#define AF_BATCH	8
#define AF_CHUNK	(AF_BATCH * PMD_SIZE)
/* Upper limit of vm.async_fork_copy_threads. */
#define AF_MAX_THREADS	32
/* Table locks of one fork: sixteen chunks' worth, see af_lock(). */
#define AF_NR_LOCKS	(16 * AF_BATCH)

struct async_fork_link {
	struct async_fork_ctx *ctx;
	struct vm_area_struct *src;	/* the parent's VMA */
	struct vm_area_struct *dst;	/* its copy in the child */
	unsigned long start, end;	/* the PMDs that may be marked */
	/* Marks not yet removed; the last to remove one stores 0 (final). */
	atomic_long_t nr_marked;
	atomic_t copiers;		/* see the lock rule */
	unsigned long first_chunk;	/* index of its first chunk */
};

struct async_fork_ctx {
	refcount_t ref;		/* child mm, task_work, each parent VMA */
	atomic_t nr_pending;	/* links with marks left */
	atomic_t parent_links;	/* parent VMAs still joined to a link */
	unsigned long flags;
	struct pid *child;
	/* Charged for every table the copy allocates, whoever copies. */
	struct mem_cgroup *memcg;
	struct callback_head work;
	u64 start_ns;
	/* The child's copy: chunks are handed out in order to its threads. */
	atomic_long_t next_chunk;
	unsigned long nr_chunks;
	atomic_long_t helper_pmds;	/* tables copied by helpers */
	atomic_t nr_helpers;		/* helpers still copying */
	struct completion helpers_done;
	struct pid *helpers[AF_MAX_THREADS - 1];
	struct mutex locks[AF_NR_LOCKS];	/* see the lock rule */
	unsigned int nr_links;
	unsigned int max_links;
	struct async_fork_link links[] __counted_by(max_links);
};

/* ctx->flags */
#define AF_FAILED	0	/* the child is being killed: no more copies */

static int sysctl_async_fork __read_mostly = 1;
static int sysctl_async_fork_copy_threads __read_mostly = 1;
static int af_max_threads = AF_MAX_THREADS;
/* Why Async-fork is off for this boot, or NULL: see async_fork_init(). */
static const char *af_off_reason __ro_after_init;
static bool af_off_cmdline __initdata;

static int __init af_setup(char *s)
{
	if (!s || strcmp(s, "off"))
		return -EINVAL;
	af_off_cmdline = true;
	return 0;
}
early_param("async_fork", af_setup);

/**
 * async_fork_available - may Async-fork be enabled in this boot?
 *
 * Return: true unless the architecture cannot mark page tables on this
 * machine (a Xen PV guest) or the command line said ``async_fork=off``.
 * A request to enable it (the sysctl, prctl(), memory.async_fork) is
 * refused with -EOPNOTSUPP otherwise.
 */
bool async_fork_available(void)
{
	return !af_off_reason;
}

DEFINE_STATIC_KEY_FALSE(async_fork_key);
/* Contexts alive; the key stays on until the last one is gone. */
static atomic_t af_live = ATOMIC_INIT(0);
static DEFINE_MUTEX(af_key_mutex);

static void af_key_update(struct work_struct *work)
{
	mutex_lock(&af_key_mutex);
	if (READ_ONCE(sysctl_async_fork))
		static_branch_enable(&async_fork_key);
	else if (!atomic_read(&af_live))
		static_branch_disable(&async_fork_key);
	mutex_unlock(&af_key_mutex);
}

static DECLARE_WORK(af_key_work, af_key_update);

/*
 * Does this fork of @mm want to be asynchronous?  vm.async_fork: 0 never,
 * 1 when the process (prctl) or its memory cgroup asked for it, 2 always.
 */
static bool af_wanted(struct mm_struct *mm)
{
	switch (READ_ONCE(sysctl_async_fork)) {
	case 1:
		return test_bit(MMF_ASYNC_FORK, &mm->flags) ||
		       mem_cgroup_async_fork();
	case 2:
		return true;
	default:
		return false;
	}
}

static int af_sysctl_handler(const struct ctl_table *table, int write,
			     void *buffer, size_t *lenp, loff_t *ppos)
{
	struct ctl_table t = *table;
	int ret, val;

	t.data = &val;
	mutex_lock(&af_key_mutex);
	val = sysctl_async_fork;
	ret = proc_dointvec_minmax(&t, write, buffer, lenp, ppos);
	if (!ret && write) {
		if (val && !async_fork_available()) {
			pr_warn_ratelimited("async_fork: cannot enable: off in this boot (%s)\n",
					    af_off_reason);
			ret = -EOPNOTSUPP;
		} else {
			WRITE_ONCE(sysctl_async_fork, val);
		}
	}
	mutex_unlock(&af_key_mutex);
	if (!ret && write) {
		/* Pairs with the barrier in async_fork_begin(). */
		smp_mb();
		af_key_update(NULL);
	}
	return ret;
}

static struct ctl_table af_sysctls[] = {
	{
		.procname	= "async_fork",
		.data		= &sysctl_async_fork,
		.maxlen		= sizeof(sysctl_async_fork),
		.mode		= 0644,
		.proc_handler	= af_sysctl_handler,
		.extra1		= SYSCTL_ZERO,
		.extra2		= SYSCTL_TWO,
	},
	{
		.procname	= "async_fork_copy_threads",
		.data		= &sysctl_async_fork_copy_threads,
		.maxlen		= sizeof(sysctl_async_fork_copy_threads),
		.mode		= 0644,
		.proc_handler	= proc_dointvec_minmax,
		.extra1		= SYSCTL_ONE,
		.extra2		= &af_max_threads,
	},
};

/*
 * A fork that wanted to be asynchronous copied the default way: it could
 * not defer (a long-term pin, no memory for the context), or found
 * nothing to defer (no PMD entirely inside private anonymous memory).
 */
static void af_fallback(struct mm_struct *mm, enum async_fork_fallback why)
{
	count_vm_event(why == AF_FALLBACK_EMPTY ? ASYNC_FORK_EMPTY :
			ASYNC_FORK_FALLBACK);
	trace_async_fork_fallback(mm, why);
}

static void af_ctx_put(struct async_fork_ctx *ctx)
{
	if (!refcount_dec_and_test(&ctx->ref))
		return;
	put_pid(ctx->child);
	mem_cgroup_put(ctx->memcg);
	kvfree(ctx);
	/* Pairs with the barrier in async_fork_begin(). */
	if (atomic_dec_and_test(&af_live) && !READ_ONCE(sysctl_async_fork))
		schedule_work(&af_key_work);
}

static bool af_failed(struct async_fork_ctx *ctx)
{
	return test_bit(AF_FAILED, &ctx->flags);
}

/* The child's copy cannot be completed: it must never run user code. */
static void af_fail(struct async_fork_ctx *ctx)
{
	if (test_and_set_bit(AF_FAILED, &ctx->flags))
		return;
	count_vm_event(ASYNC_FORK_ERROR);
	if (ctx->child)
		kill_pid(ctx->child, SIGKILL, 1);
}

/*
 * The lock of the table at @addr.  Tables fewer than AF_NR_LOCKS apart
 * take different locks, and chunks are handed out in address order, so the
 * child's copiers, each on its own chunk, seldom meet.
 */
static struct mutex *af_lock(struct async_fork_link *link, unsigned long addr)
{
	return &link->ctx->locks[(addr >> PMD_SHIFT) % AF_NR_LOCKS];
}

/*
 * Copy the table under the marked PMD at @addr to the child and remove the
 * mark; only remove it if !@copy.  Returns 1 if a table was copied, 0 if
 * there was no mark, or an error.  Called with the table's lock held, by a
 * copier of @link.
 */
static int af_copy_pmd(struct async_fork_link *link, unsigned long addr,
		       bool copy)
{
	struct vm_area_struct *src = link->src, *dst = link->dst;
	pmd_t *src_pmd, *dst_pmd;
	int err = 0;

	lockdep_assert_held(af_lock(link, addr));
	src_pmd = mm_find_pmd(src->vm_mm, addr);
	if (!src_pmd || !pmd_async_fork_marked(pmdp_get_lockless(src_pmd)))
		return 0;
	if (copy) {
		/* fork() allocated the child's PMD table: copy_pmd_range(). */
		dst_pmd = mm_find_pmd(dst->vm_mm, addr);
		if (WARN_ON_ONCE(!dst_pmd))
			err = -EFAULT;
		else
			err = copy_deferred_pte_table(dst, src, dst_pmd,
						      src_pmd, addr);
	}
	/*
	 * A table copied in part, or not at all, must never look copied to
	 * the child: the fork is failed, and the child killed, before the
	 * mark goes.  Whoever then sees the mark gone, under this lock or
	 * through nr_marked, also sees the failure (af_fail() is fully
	 * ordered).
	 */
	if (err)
		af_fail(link->ctx);
	/*
	 * The parent's PTEs were write-protected under the mark, and no
	 * writable TLB entry can exist below a mark (fork() flushed), so the
	 * mark can go without a flush: a stale read-only entry costs one
	 * spurious fault at most.
	 */
	pmdp_async_fork_unmark(src_pmd);
	/*
	 * Copiers of other tables of the link remove their marks under other
	 * locks: the one that finds the count at 1 removed the last mark.  If
	 * it was the last of the fork, it releases write_protect_seq (see
	 * above) before the link shows no marks, with a release that pairs
	 * with the acquire in async_fork_vma_write(): a fork() that finished
	 * the links finds the seqcount released.
	 */
	if (atomic_long_add_unless(&link->nr_marked, -1, 1))
		return err ? err : copy;
	if (atomic_dec_and_test(&link->ctx->nr_pending)) {
		/* Balances KCSAN's count in this task: see async_fork_end(). */
		kcsan_nestable_atomic_begin();
		raw_write_seqcount_end(&src->vm_mm->write_protect_seq);
	}
	atomic_long_set_release(&link->nr_marked, 0);
	return err ? err : copy;
}

static void af_leave(struct async_fork_link *link)
{
	if (atomic_dec_and_test(&link->copiers))
		wake_up_var(&link->copiers);
}

/*
 * Become a copier of @link, if it has marks left: only then may its VMAs
 * be looked at (see the lock rule).  af_leave() when done.
 */
static bool af_enter(struct async_fork_link *link)
{
	atomic_inc(&link->copiers);
	/* Pairs with the barrier in af_wait_copiers(). */
	smp_mb__after_atomic();
	if (atomic_long_read(&link->nr_marked))
		return true;
	af_leave(link);
	return false;
}

/* The last mark of @link is gone: wait until no copier looks at it. */
static void af_wait_copiers(struct async_fork_link *link)
{
	/* Pairs with the barrier in af_enter(). */
	smp_mb();
	wait_var_event(&link->copiers, !atomic_read(&link->copiers));
}

/* af_copy_range() without its cleanup after a failure. */
static long af_copy_tables(struct async_fork_link *link, unsigned long start,
			   unsigned long end)
{
	struct mem_cgroup *old_memcg;
	unsigned long addr;
	long copied = 0;
	int ret;

	/*
	 * The tables belong to the child, and fork() would have charged
	 * them to the parent's cgroup: so does a copy made later, by the
	 * child, a helper, the parent, or a remote reader of either.
	 */
	old_memcg = set_active_memcg(link->ctx->memcg);
	/* One table per entry, so that whoever ends the link waits for one. */
	for (addr = start; addr < end && af_enter(link); addr += PMD_SIZE) {
		struct mutex *lock = af_lock(link, addr);

		mutex_lock(lock);
		ret = af_copy_pmd(link, addr, !af_failed(link->ctx));
		mutex_unlock(lock);
		af_leave(link);
		if (ret > 0)
			copied += ret;
	}
	set_active_memcg(old_memcg);
	return copied;
}

/*
 * Copy the marked tables of [start, end) of @link, each under its lock
 * (remove their marks if the fork failed).  Returns the number of tables
 * copied, or -EIO if the child is being killed.
 */
static long af_copy_range(struct async_fork_link *link, unsigned long start,
			  unsigned long end)
{
	long copied;

	start = max(start & PMD_MASK, link->start);
	end = min(end, link->end);
	copied = af_copy_tables(link, start, end);
	if (!af_failed(link->ctx))
		return copied;
	/* Nothing of this fork may stay marked for long. */
	af_copy_tables(link, link->start, link->end);
	return -EIO;
}

/*
 * Make [start, end) of the link copied before @vma (of either side, held
 * by the caller) changes.  Returns -EIO if the child's copy has failed.
 */
static int af_sync(struct async_fork_link *link, struct vm_area_struct *vma,
		   unsigned long start, unsigned long end, bool vma_wide)
{
	bool parent = vma == link->src;
	/* Timed only for the tracepoint. */
	u64 t0 = trace_async_fork_sync_enabled() ? ktime_get_ns() : 0;
	long copied;

	copied = af_copy_range(link, start, end);
	if (!copied && af_failed(link->ctx))
		copied = -EIO;
	if (copied <= 0)
		return copied;
	/* On the child's side, the child copied on demand. */
	count_vm_events(parent ? ASYNC_FORK_PMD_SYNC : ASYNC_FORK_PMD_CHILD,
			copied);
	if (vma_wide && parent)
		count_vm_event(ASYNC_FORK_VMA_SYNC);
	if (trace_async_fork_sync_enabled())
		trace_async_fork_sync(vma->vm_mm, start, end, copied, vma_wide,
				      t0 ? ktime_get_ns() - t0 : 0);
	return 0;
}

/*
 * A synchronization needs the mmap_lock, or the VMA's own lock for a fault
 * under it: then no fork() can mark the range again meanwhile.
 */
static void af_assert_locked(struct vm_area_struct *vma)
{
	if (!rwsem_is_locked(&vma->vm_lock->lock))
		mmap_assert_locked(vma->vm_mm);
}

bool __async_fork_vma_pending(struct vm_area_struct *vma)
{
	struct async_fork_link *link = READ_ONCE(vma->async_fork);

	/* Racy by design: nr_marked only goes down. */
	return link && atomic_long_read(&link->nr_marked);
}

bool __async_fork_is_child(struct vm_area_struct *vma)
{
	struct async_fork_link *link = READ_ONCE(vma->async_fork);

	/* Racy by design, as above. */
	return link && link->dst == vma && atomic_long_read(&link->nr_marked);
}

vm_fault_t __async_fork_fault(struct vm_area_struct *vma, pmd_t *pmd,
			      unsigned long address)
{
	struct async_fork_link *link = vma->async_fork;
	unsigned long start = address & PMD_MASK;

	af_assert_locked(vma);
	if (link->src == vma) {
		if (pmd_async_fork_marked(pmdp_get_lockless(pmd)))
			af_sync(link, vma, start, start + PMD_SIZE, false);
		return 0;
	}
	/*
	 * The child touches its memory before its copy is done (a signal
	 * frame, CLONE_CHILD_SETTID, ptrace): copy this table first.
	 */
	/* Racy: af_enter() and af_copy_pmd() check again. */
	if (!atomic_long_read(&link->nr_marked))
		return 0;
	return af_sync(link, vma, start, start + PMD_SIZE, false) ?
		VM_FAULT_SIGBUS : 0;
}

void __async_fork_sync_range(struct vm_area_struct *vma, unsigned long start,
			     unsigned long end)
{
	struct async_fork_link *link = vma->async_fork;

	af_assert_locked(vma);
	/* Racy: af_enter() and af_copy_pmd() check again. */
	if (atomic_long_read(&link->nr_marked))
		af_sync(link, vma, start, end, false);
}

/*
 * vma_start_write() on a VMA of either side of a link: the VMA is about to
 * change, so finish its copy and detach it.  The caller holds the mmap_lock
 * for writing and has write-locked the VMA, so no fault handler or walker
 * of this mm can be looking at vma->async_fork; copiers on the other side
 * are waited for.  Exported: vma_start_write() is inline, and modules call
 * it (vm_flags_set()).
 */
void async_fork_vma_write(struct vm_area_struct *vma)
{
	struct async_fork_link *link = vma->async_fork;
	bool parent = link->src == vma;

	mmap_assert_write_locked(vma->vm_mm);
	/* 0 is final and released: af_copy_pmd(). */
	if (atomic_long_read_acquire(&link->nr_marked))
		af_sync(link, vma, link->start, link->end, true);
	/* Every table of the link was looked at: none can be left marked. */
	VM_WARN_ON_ONCE(atomic_long_read(&link->nr_marked));
	af_wait_copiers(link);
	vma->async_fork = NULL;
	if (!parent)
		return;
	/*
	 * dup_mmap() write-locks every VMA before it copies it, so all the
	 * links a parent still has belong to its latest fork: the last one
	 * to go leaves none.
	 */
	if (atomic_dec_and_test(&link->ctx->parent_links))
		clear_bit(MMF_ASYNC_FORK_LINKED, &vma->vm_mm->flags);
	af_ctx_put(link->ctx);
}
EXPORT_SYMBOL_GPL(async_fork_vma_write);

/*
 * Give up the copy of @vma's link: the child is killed (it has not run
 * user code yet) and the marks are removed without copying.  For an OOM
 * victim, whose memory must be freed now, by the OOM reaper or its own
 * exit, under the mmap_lock held for reading: a copy would allocate, and
 * skipping the VMA would free nothing.  Nor may it wait for a copier,
 * which may be starved of CPU: a table whose lock is taken keeps its mark
 * until that copier, or whoever ends the link, removes it, and the zap
 * meanwhile is harmless (see __async_fork_failed()).
 */
void __async_fork_fail_vma(struct vm_area_struct *vma)
{
	struct async_fork_link *link = READ_ONCE(vma->async_fork);
	unsigned long addr;

	af_fail(link->ctx);
	for (addr = link->start; addr < link->end && af_enter(link);
	     addr += PMD_SIZE) {
		struct mutex *lock = af_lock(link, addr);

		if (mutex_trylock(lock)) {
			af_copy_pmd(link, addr, false);
			mutex_unlock(lock);
		}
		af_leave(link);
	}
}

/*
 * Has the copy of @vma's link been given up?  A table still marked then
 * may be zapped: nobody copies it any more, except a copier that was
 * already at work, which reads the parent's PTEs under the PTE lock, as
 * the zap changes them, and hands only the child what it saw.
 */
bool __async_fork_failed(struct vm_area_struct *vma)
{
	struct async_fork_link *link = READ_ONCE(vma->async_fork);

	return link && af_failed(link->ctx);
}

/*
 * Finish and detach every link of @mm; mmap_lock held for writing.  Each
 * VMA is write-locked first, as for any change: a fault under the per-VMA
 * lock may be looking at its link.
 */
static void af_finish_mm(struct mm_struct *mm)
{
	struct vm_area_struct *vma;
	struct vma_iterator vmi;

	mmap_assert_write_locked(mm);
	vma_iter_init(&vmi, mm, 0);
	for_each_vma(vmi, vma) {
		if (xa_is_zero(vma))
			break;
		if (vma->async_fork)
			vma_start_write(vma);
	}
}

/*
 * mm_take_all_locks(): finish the copies of @mm's children before the
 * global mm_all_locks_mutex is taken, not under it.
 */
void __async_fork_finish_mm(struct mm_struct *mm)
{
	af_finish_mm(mm);
}

/* Is @vma private anonymous memory whose PTE tables fork() may defer? */
static bool af_vma_deferrable(struct vm_area_struct *vma)
{
	/*
	 * hugetlb, PFNMAP/MIXEDMAP and I/O mappings keep their own copy
	 * paths; a range armed for userfaultfd must keep its uffd-wp bits
	 * and must not see UFFDIO_COPY land before the child copied; shadow
	 * stacks fault on reads through a mark.  File mappings are copied at
	 * fork as before: truncation zaps them under i_mmap_rwsem, where the
	 * copy could not allocate.
	 */
	if (!vma_is_anonymous(vma) || !vma->anon_vma ||
	    !is_cow_mapping(vma->vm_flags))
		return false;
	if (vma->vm_flags & (VM_HUGETLB | VM_PFNMAP | VM_MIXEDMAP | VM_IO |
			     VM_SHADOW_STACK | VM_WIPEONFORK | VM_DONTCOPY))
		return false;
	return !userfaultfd_armed(vma);
}

/*
 * fork(), with oldmm's mmap_lock held for writing: decide whether this
 * fork is asynchronous, and if so return its context.
 */
struct async_fork_ctx *async_fork_begin(struct mm_struct *oldmm,
					struct mm_struct *mm)
{
	struct async_fork_ctx *ctx;
	int i;

	if (!static_branch_unlikely(&async_fork_key))
		return NULL;
	mmap_assert_write_locked(oldmm);
	/*
	 * One fork in progress at a time: see write_protect_seq above.  Only
	 * a pending copy holds it here, as fork() copies under our lock.
	 */
	if (raw_read_seqcount(&oldmm->write_protect_seq) & 1)
		af_finish_mm(oldmm);
	VM_WARN_ON_ONCE(raw_read_seqcount(&oldmm->write_protect_seq) & 1);
	if (!af_wanted(oldmm))
		return NULL;
	/*
	 * A page pinned for the long term (io_uring fixed buffers, RDMA,
	 * VFIO) may be written by a device for I/O the parent starts after
	 * fork() returned, with no page-table walk on the way: the child
	 * must get its copy now.  Other pins (O_DIRECT, netfs reads) last
	 * only as long as I/O started before fork(), whose order against
	 * fork() nobody can observe; a new pin after fork() goes through
	 * GUP, which copies the table first; and copy_pte_range() copies,
	 * rather than shares, a page that is pinned when the child copies it.
	 */
	if (test_bit(MMF_ASYNC_FORK_LONGTERM_PIN, &oldmm->flags)) {
		af_fallback(oldmm, AF_FALLBACK_LONGTERM_PIN);
		return NULL;
	}
	atomic_inc(&af_live);
	/* Count before reading the sysctl: pairs with af_sysctl_handler(). */
	smp_mb__after_atomic();
	if (!READ_ONCE(sysctl_async_fork)) {
		if (atomic_dec_and_test(&af_live))
			schedule_work(&af_key_work);
		return NULL;
	}
	ctx = kvzalloc(struct_size(ctx, links, oldmm->map_count),
		       GFP_KERNEL_ACCOUNT);
	if (!ctx) {
		if (atomic_dec_and_test(&af_live))
			schedule_work(&af_key_work);
		af_fallback(oldmm, AF_FALLBACK_NOMEM);
		return NULL;
	}
	refcount_set(&ctx->ref, 1);	/* the child's mm */
	for (i = 0; i < AF_NR_LOCKS; i++)
		mutex_init(&ctx->locks[i]);
	ctx->max_links = oldmm->map_count;
	ctx->memcg = get_mem_cgroup_from_mm(oldmm);
	ctx->start_ns = ktime_get_ns();
	mm->async_fork_ctx = ctx;
	return ctx;
}

/* copy_pmd_range() leaves the table under @src_pmd to the child. */
bool __async_fork_defer_pmd(struct vm_area_struct *dst_vma, pmd_t *src_pmd)
{
	struct async_fork_link *link = dst_vma->async_fork;

	/*
	 * A long-term pin taken by GUP-fast after async_fork_begin() looked
	 * must not end below a mark.  copy_page_range() holds
	 * write_protect_seq here: either GUP-fast sees it odd (or changed)
	 * and fails, or this sees the flag and copies the table now.
	 */
	if (!atomic_long_read(&link->nr_marked))
		/*
		 * Pairs with async_fork_longterm_pin(); once per VMA, as
		 * any later pin sees the seqcount.
		 */
		smp_mb();
	if (test_bit(MMF_ASYNC_FORK_LONGTERM_PIN, &link->src->vm_mm->flags))
		return false;
	pmdp_async_fork_mark(src_pmd);
	atomic_long_inc(&link->nr_marked);
	return true;
}

/* dup_mmap(): copy_page_range(), leaving what it can to the child. */
int async_fork_copy_page_range(struct async_fork_ctx *ctx,
			       struct vm_area_struct *dst_vma,
			       struct vm_area_struct *src_vma)
{
	struct async_fork_link *link;
	int err;

	if (ctx)
		vma_assert_write_locked(src_vma);
	if (!ctx || !af_vma_deferrable(src_vma) ||
	    ctx->nr_links == ctx->max_links ||
	    ALIGN(src_vma->vm_start, PMD_SIZE) >=
	    ALIGN_DOWN(src_vma->vm_end, PMD_SIZE))
		return copy_page_range(dst_vma, src_vma);

	link = &ctx->links[ctx->nr_links];
	link->ctx = ctx;
	link->src = src_vma;
	link->dst = dst_vma;
	link->start = ALIGN(src_vma->vm_start, PMD_SIZE);
	link->end = ALIGN_DOWN(src_vma->vm_end, PMD_SIZE);
	atomic_long_set(&link->nr_marked, 0);
	atomic_set(&link->copiers, 0);

	/* Seen by copy_pmd_range() through async_fork_defer_pmd(). */
	dst_vma->async_fork = link;
	err = copy_page_range(dst_vma, src_vma);
	if (!atomic_long_read(&link->nr_marked)) {
		dst_vma->async_fork = NULL;
		return err;
	}
	ctx->nr_links++;
	refcount_inc(&ctx->ref);
	src_vma->async_fork = link;
	return err;
}

/* Remove every mark of @ctx without copying.  No table lock held. */
static void af_rollback(struct async_fork_ctx *ctx)
{
	unsigned int i;

	set_bit(AF_FAILED, &ctx->flags);
	for (i = 0; i < ctx->nr_links; i++)
		af_copy_range(&ctx->links[i], ctx->links[i].start,
			      ctx->links[i].end);
}

/*
 * End of dup_mmap(), both mmap_locks still held for writing.  On error the
 * child's mm is about to be torn down: remove the marks now, while nothing
 * else can look at the parent's VMAs.
 */
void async_fork_end(struct async_fork_ctx *ctx, struct mm_struct *mm, int err)
{
	unsigned long pmds = 0;
	unsigned int i;

	if (!ctx)
		return;
	mmap_assert_write_locked(mm);
	if (ctx->nr_links) {
		struct mm_struct *oldmm = ctx->links[0].src->vm_mm;

		mmap_assert_write_locked(oldmm);
		/* Released with the last mark: see write_protect_seq above. */
		atomic_set(&ctx->nr_pending, ctx->nr_links);
		raw_write_seqcount_begin(&oldmm->write_protect_seq);
		/*
		 * The section outlives this task's fork(), and another task
		 * may end it: KCSAN's nesting count is per task.
		 */
		kcsan_nestable_atomic_end();
	}
	/*
	 * On error, no other copier can be at work: the child has not run,
	 * and every VMA of the parent is write-locked.
	 */
	if (err || !ctx->nr_links) {
		if (err)
			af_rollback(ctx);
		else
			af_fallback(mm, AF_FALLBACK_EMPTY);
		for (i = 0; i < ctx->nr_links; i++) {
			ctx->links[i].src->async_fork = NULL;
			ctx->links[i].dst->async_fork = NULL;
			af_ctx_put(ctx);
		}
		mm->async_fork_ctx = NULL;
		af_ctx_put(ctx);
		return;
	}
	for (i = 0; i < ctx->nr_links; i++) {
		struct async_fork_link *link = &ctx->links[i];

		pmds += atomic_long_read(&link->nr_marked);
		link->first_chunk = ctx->nr_chunks;
		ctx->nr_chunks += DIV_ROUND_UP(link->end - link->start,
					       AF_CHUNK);
	}
	atomic_set(&ctx->parent_links, ctx->nr_links);
	set_bit(MMF_ASYNC_FORK_LINKED, &ctx->links[0].src->vm_mm->flags);
	count_vm_event(ASYNC_FORK);
	trace_async_fork_start(ctx->links[0].src->vm_mm, mm, ctx->nr_links,
			       pmds);
}

/*
 * Detach the child's VMAs and let go of the context; mmap_lock held for
 * writing.  Its VMAs, not the links, say what is left to detach: a child
 * VMA whose link was ended early (by a remote change: a userfaultfd monitor
 * of fork events registering it, say) may be gone since.
 */
static void af_child_detach(struct mm_struct *mm, struct async_fork_ctx *ctx)
{
	af_finish_mm(mm);
	mm->async_fork_ctx = NULL;
	af_ctx_put(ctx);
}

/*
 * Copy chunks of @ctx until none is left or the copy has failed; the child
 * and its helpers all run this.  Returns the number of tables copied.
 */
static unsigned long af_copy_chunks(struct async_fork_ctx *ctx)
{
	unsigned long idx, pmds = 0;
	unsigned int i = 0;
	long ret;

	for (;;) {
		struct async_fork_link *link;
		unsigned long addr;

		idx = atomic_long_fetch_inc(&ctx->next_chunk);
		if (idx >= ctx->nr_chunks)
			break;
		/* Chunks are handed out in order: the link only moves on. */
		while (i + 1 < ctx->nr_links &&
		       ctx->links[i + 1].first_chunk <= idx)
			i++;
		link = &ctx->links[i];
		addr = link->start + (idx - link->first_chunk) * AF_CHUNK;
		/*
		 * Only a fatal signal stops a copier: a helper that stopped
		 * for job control, the freezer or a tracer would leave the
		 * child waiting for it where none of those can reach the
		 * child.  The child stops, or freezes, once its copy is done.
		 */
		if (fatal_signal_pending(current))
			af_fail(ctx);
		if (af_failed(ctx))
			break;
		ret = af_copy_range(link, addr, addr + AF_CHUNK);
		if (ret < 0)
			break;
		pmds += ret;
		cond_resched();
	}
	return pmds;
}

static int af_helper_fn(void *arg)
{
	struct async_fork_ctx *ctx = arg;

	atomic_long_add(af_copy_chunks(ctx), &ctx->helper_pmds);
	if (atomic_dec_and_test(&ctx->nr_helpers))
		complete(&ctx->helpers_done);
	do_exit(0);
}

/*
 * Start up to vm.async_fork_copy_threads - 1 helpers for the child's copy,
 * from the child, which must not have run user code yet.  Returns how many
 * started: fewer, or none, if the child's limits forbid more threads or a
 * signal is pending for it (copy_process() fails then); the child copies
 * the rest itself.
 */
static unsigned int af_start_helpers(struct async_fork_ctx *ctx)
{
	struct kernel_clone_args args = {
		.flags		= CLONE_FS | CLONE_UNTRACED | CLONE_VM |
				  CLONE_THREAD | CLONE_SIGHAND,
		.fn		= af_helper_fn,
		.fn_arg		= ctx,
		.name		= "async_fork",
		.user_worker	= 1,
		.no_files	= 1,
	};
	unsigned int i, n = READ_ONCE(sysctl_async_fork_copy_threads) - 1;

	n = min_t(unsigned long, n, ctx->nr_chunks - 1);
	init_completion(&ctx->helpers_done);
	/* The starter's count: none completes before all have started. */
	atomic_set(&ctx->nr_helpers, 1);
	for (i = 0; i < n; i++) {
		struct task_struct *tsk;

		tsk = copy_process(NULL, 0, NUMA_NO_NODE, &args);
		if (IS_ERR(tsk))
			break;
		ctx->helpers[i] = get_pid(task_pid(tsk));
		atomic_inc(&ctx->nr_helpers);
		wake_up_new_task(tsk);
	}
	if (atomic_dec_and_test(&ctx->nr_helpers))
		complete(&ctx->helpers_done);
	return i;
}

/*
 * Wait until the helpers have left the child's thread group, so that the
 * child runs its first instruction single-threaded, as after any fork()
 * (unshare(CLONE_NEWUSER) refuses a process with other threads, say).
 * release_task() detaches a helper's pid, which wakes its pidfd waiters,
 * and unlinks the helper from the thread group in one siglock section:
 * taking siglock once after the last wake-up waits for the unlink.  Only
 * a fatal signal ends the wait early (a tracer may hold a helper's exit).
 */
static void af_reap_helpers(struct async_fork_ctx *ctx, unsigned int nr)
{
	unsigned int i;

	for (i = 0; i < nr; i++) {
		struct pid *pid = ctx->helpers[i];

		wait_event_killable(pid->wait_pidfd,
				    !pid_has_task(pid, PIDTYPE_PID));
		put_pid(pid);
	}
	spin_lock_irq(&current->sighand->siglock);
	WARN_ON_ONCE(!thread_group_empty(current) &&
		     !fatal_signal_pending(current));
	spin_unlock_irq(&current->sighand->siglock);
}

/* The child copies, with its helpers, before it returns to user space. */
static void af_child_copy(struct mm_struct *mm, struct async_fork_ctx *ctx)
{
	unsigned int nr_helpers;
	unsigned long pmds;
	int err = 0;

	nr_helpers = af_start_helpers(ctx);
	pmds = af_copy_chunks(ctx);
	/*
	 * The helpers use the links, which the child's VMAs must outlive.
	 * A fatal signal only makes them stop sooner.
	 */
	if (wait_for_completion_killable(&ctx->helpers_done)) {
		af_fail(ctx);
		wait_for_completion(&ctx->helpers_done);
	}
	af_reap_helpers(ctx, nr_helpers);
	pmds += atomic_long_read(&ctx->helper_pmds);
	if (af_failed(ctx))
		af_rollback(ctx);
	mmap_write_lock(mm);
	af_child_detach(mm, ctx);
	mmap_write_unlock(mm);
	/*
	 * Every link is ended now and its copiers have left: one that failed
	 * (the parent, a helper, a remote reader) failed the fork before it
	 * removed its mark.  Pairs with af_fail() and af_leave(), both fully
	 * ordered: look only now, or a failure could be missed.
	 */
	smp_mb();
	if (af_failed(ctx))
		err = -EIO;
	count_vm_events(ASYNC_FORK_PMD_CHILD, pmds);
	trace_async_fork_child_done(mm, pmds, nr_helpers + 1,
				    ktime_get_ns() - ctx->start_ns, err);
	if (err)
		force_sig(SIGKILL);
}

static void af_child_work(struct callback_head *work)
{
	struct async_fork_ctx *ctx = container_of(work, struct async_fork_ctx,
						  work);
	struct mm_struct *mm = current->mm;

	/*
	 * On the way to exit, after exit_mm(), there is nothing left to copy
	 * to: exit_mmap() of the child rolls back.
	 */
	if (mm && mm->async_fork_ctx == ctx && !(current->flags & PF_EXITING))
		af_child_copy(mm, ctx);
	af_ctx_put(ctx);
}

/* kernel_clone(), before the child first runs. */
void async_fork_start_child(struct task_struct *p)
{
	struct async_fork_ctx *ctx = p->mm ? p->mm->async_fork_ctx : NULL;

	if (!ctx)
		return;
	ctx->child = get_task_pid(p, PIDTYPE_PID);
	refcount_inc(&ctx->ref);
	init_task_work(&ctx->work, af_child_work);
	if (task_work_add(p, &ctx->work, TWA_RESUME))
		af_ctx_put(ctx);
}

/* Is @mm the memory of a process the OOM killer chose? */
static bool af_oom_victim(struct mm_struct *mm)
{
	return test_bit(MMF_OOM_REAP_QUEUED, &mm->flags) ||
	       (tsk_is_oom_victim(current) && current->signal->oom_mm == mm);
}

/*
 * exit_mmap(), before anything is torn down: a child that dies before its
 * copy is done removes the marks it did not copy; a parent finishes every
 * copy first, so that its children get their complete snapshot, unless the
 * OOM killer chose it.
 */
void async_fork_exit_mmap(struct mm_struct *mm)
{
	struct async_fork_ctx *ctx = mm->async_fork_ctx;
	struct vm_area_struct *vma;
	struct vma_iterator vmi;

	if (ctx) {
		af_rollback(ctx);
		mmap_write_lock(mm);
		af_child_detach(mm, ctx);
		mmap_write_unlock(mm);
	}
	if (!test_bit(MMF_ASYNC_FORK_LINKED, &mm->flags))
		return;
	if (!af_oom_victim(mm)) {
		mmap_write_lock(mm);
		af_finish_mm(mm);
		mmap_write_unlock(mm);
		return;
	}
	/*
	 * An OOM victim must free memory, not allocate its children's page
	 * tables, nor wait for their copiers: the children have not run user
	 * code and die as if fork() had failed.  The links end once the
	 * memory is unmapped, before the page tables go (exit_mmap() calls
	 * async_fork_finish_mm()).
	 */
	mmap_read_lock(mm);
	vma_iter_init(&vmi, mm, 0);
	for_each_vma(vmi, vma) {
		if (xa_is_zero(vma))
			break;
		if (async_fork_vma_pending(vma))
			__async_fork_fail_vma(vma);
	}
	mmap_read_unlock(mm);
}

static int __init async_fork_init(void)
{
	af_off_reason = arch_async_fork_unsupported();
	if (!af_off_reason && af_off_cmdline)
		af_off_reason = "async_fork=off";
	if (af_off_reason) {
		sysctl_async_fork = 0;
		pr_info("async_fork: off in this boot: %s\n", af_off_reason);
	}
	register_sysctl_init("vm", af_sysctls);
	if (sysctl_async_fork)
		static_branch_enable(&async_fork_key);
	return 0;
}
subsys_initcall(async_fork_init);
