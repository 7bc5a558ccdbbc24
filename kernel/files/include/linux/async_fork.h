/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Async-fork: fork() copies the upper page-table levels and returns; the
 * child copies the PTE tables.  See mm/async_fork.c.
 */
#ifndef _LINUX_ASYNC_FORK_H
#define _LINUX_ASYNC_FORK_H

#include <linux/jump_label.h>
#include <linux/mm.h>

struct async_fork_ctx;

/* Why a fork that asked for Async-fork copied the default way. */
enum async_fork_fallback {
	AF_FALLBACK_LONGTERM_PIN,	/* the process pinned pages long-term */
	AF_FALLBACK_NOMEM,		/* no memory for the fork's context */
	AF_FALLBACK_EMPTY,		/* no PTE table that could be deferred */
};

#ifdef CONFIG_ASYNC_FORK

#ifndef arch_async_fork_unsupported
/* Why this machine cannot mark page tables, or NULL if it can. */
static inline const char *arch_async_fork_unsupported(void)
{
	return NULL;
}
#endif

/* On while vm.async_fork is not 0 or any fork is still being copied. */
DECLARE_STATIC_KEY_FALSE(async_fork_key);

struct async_fork_ctx *async_fork_begin(struct mm_struct *oldmm,
					struct mm_struct *mm);
int async_fork_copy_page_range(struct async_fork_ctx *ctx,
			       struct vm_area_struct *dst_vma,
			       struct vm_area_struct *src_vma);
void async_fork_end(struct async_fork_ctx *ctx, struct mm_struct *mm,
		    int err);
void async_fork_start_child(struct task_struct *p);
void async_fork_exit_mmap(struct mm_struct *mm);
bool async_fork_available(void);
void __async_fork_finish_mm(struct mm_struct *mm);
void __async_fork_fail_vma(struct vm_area_struct *vma);
bool __async_fork_failed(struct vm_area_struct *vma);
bool __async_fork_defer_pmd(struct vm_area_struct *dst_vma, pmd_t *src_pmd);
vm_fault_t __async_fork_fault(struct vm_area_struct *vma, pmd_t *pmd,
			      unsigned long address);
void __async_fork_sync_range(struct vm_area_struct *vma, unsigned long start,
			     unsigned long end);
bool __async_fork_vma_pending(struct vm_area_struct *vma);
bool __async_fork_is_child(struct vm_area_struct *vma);

/* Does @vma belong to a fork whose copy may not be finished? */
static inline bool async_fork_vma_linked(struct vm_area_struct *vma)
{
	return static_branch_unlikely(&async_fork_key) &&
	       unlikely(READ_ONCE(vma->async_fork));
}

/* Is part of @vma still to be copied to, or by, a child? */
static inline bool async_fork_vma_pending(struct vm_area_struct *vma)
{
	return async_fork_vma_linked(vma) && __async_fork_vma_pending(vma);
}

/*
 * The OOM reaper is about to reap @vma: a copy still pending there is
 * given up (its child killed) rather than made, which would allocate.
 */
static inline void async_fork_oom_reap(struct vm_area_struct *vma)
{
	if (async_fork_vma_pending(vma))
		__async_fork_fail_vma(vma);
}

/*
 * Zapping below a mark is a bug (callers copy first), except where the
 * copy was given up for an OOM victim (async_fork_oom_reap()).
 */
static inline bool async_fork_zap_marked_ok(struct vm_area_struct *vma)
{
	return !async_fork_vma_linked(vma) || __async_fork_failed(vma);
}

/* Finish every copy of @mm's children; mmap_lock held for writing. */
static inline void async_fork_finish_mm(struct mm_struct *mm)
{
	if (test_bit(MMF_ASYNC_FORK_LINKED, &mm->flags))
		__async_fork_finish_mm(mm);
}

/*
 * execve() of a setuid, setgid or file-capability program: the opt-in of
 * whoever started it does not carry over to the privileged program.
 */
static inline void async_fork_secure_exec(struct mm_struct *mm)
{
	clear_bit(MMF_ASYNC_FORK, &mm->flags);
}

/*
 * copy_pmd_range() asks whether fork() may leave the PTE table of a PMD
 * that lies entirely inside the VMA to the child.
 */
static inline bool async_fork_defer_pmd(struct vm_area_struct *dst_vma,
					pmd_t *src_pmd, unsigned long addr,
					unsigned long next)
{
	if (likely(!dst_vma->async_fork) || next - addr != PMD_SIZE)
		return false;
	return __async_fork_defer_pmd(dst_vma, src_pmd);
}

/*
 * The page fault handler calls this before it looks below the PMD at
 * @address: the PTE table there must be the child's too before anything
 * changes it.  Returns VM_FAULT_SIGBUS only in a child whose copy failed.
 */
static inline vm_fault_t async_fork_fault(struct vm_area_struct *vma,
					  pmd_t *pmd, unsigned long address)
{
	if (!async_fork_vma_linked(vma))
		return 0;
	return __async_fork_fault(vma, pmd, address);
}

/*
 * Copy to the child every PTE table of [start, end) of @vma that fork()
 * left to it, before a walk that changes PTEs there (or hands their
 * writability to someone else).  Caller holds the mmap_lock or the VMA
 * lock, so no new fork can mark the range again meanwhile.
 */
static inline void async_fork_sync_range(struct vm_area_struct *vma,
					 unsigned long start,
					 unsigned long end)
{
	if (async_fork_vma_linked(vma))
		__async_fork_sync_range(vma, start, end);
}

/*
 * GUP must not look below a marked PMD (nor below an empty one in a child
 * that is still copying): it returns "no page" so that the fault path
 * copies the table first.
 */
static inline bool async_fork_gup_defer(struct vm_area_struct *vma,
					pmd_t pmdval)
{
	if (!async_fork_vma_linked(vma))
		return false;
	return pmd_async_fork_marked(pmdval) ||
	       (pmd_none(pmdval) && __async_fork_is_child(vma));
}

/* GUP-fast leaves marked PMDs to the slow path. */
static inline bool async_fork_gup_fast_defer(pmd_t pmd)
{
	return static_branch_unlikely(&async_fork_key) &&
	       pmd_async_fork_marked(pmd);
}

/*
 * A FOLL_LONGTERM pin outlives the call that took it: a device may write
 * through it for I/O that the parent starts after a later fork() returned,
 * with no page-table walk to hook.  Such an mm copies its page tables at
 * fork, as before.
 */
static inline void async_fork_longterm_pin(struct mm_struct *mm)
{
	if (!test_bit(MMF_ASYNC_FORK_LONGTERM_PIN, &mm->flags))
		set_bit(MMF_ASYNC_FORK_LONGTERM_PIN, &mm->flags);
	/*
	 * Before GUP-fast reads write_protect_seq: pairs with the barrier
	 * in __async_fork_defer_pmd().
	 */
	smp_mb();
}

#else /* !CONFIG_ASYNC_FORK */

static inline struct async_fork_ctx *async_fork_begin(struct mm_struct *oldmm,
						      struct mm_struct *mm)
{
	return NULL;
}

static inline int async_fork_copy_page_range(struct async_fork_ctx *ctx,
					     struct vm_area_struct *dst_vma,
					     struct vm_area_struct *src_vma)
{
	return copy_page_range(dst_vma, src_vma);
}

static inline void async_fork_end(struct async_fork_ctx *ctx,
				  struct mm_struct *mm, int err)
{
}

static inline void async_fork_start_child(struct task_struct *p)
{
}

static inline void async_fork_exit_mmap(struct mm_struct *mm)
{
}

static inline bool async_fork_available(void)
{
	return false;
}

static inline void async_fork_oom_reap(struct vm_area_struct *vma)
{
}

static inline void async_fork_finish_mm(struct mm_struct *mm)
{
}

static inline bool async_fork_zap_marked_ok(struct vm_area_struct *vma)
{
	return true;
}

static inline void async_fork_secure_exec(struct mm_struct *mm)
{
}

static inline bool async_fork_vma_linked(struct vm_area_struct *vma)
{
	return false;
}

static inline bool async_fork_vma_pending(struct vm_area_struct *vma)
{
	return false;
}

static inline bool pmd_async_fork_marked(pmd_t pmd)
{
	return false;
}

static inline bool async_fork_defer_pmd(struct vm_area_struct *dst_vma,
					pmd_t *src_pmd, unsigned long addr,
					unsigned long next)
{
	return false;
}

static inline vm_fault_t async_fork_fault(struct vm_area_struct *vma,
					  pmd_t *pmd, unsigned long address)
{
	return 0;
}

static inline void async_fork_sync_range(struct vm_area_struct *vma,
					 unsigned long start,
					 unsigned long end)
{
}

static inline bool async_fork_gup_defer(struct vm_area_struct *vma,
					pmd_t pmdval)
{
	return false;
}

static inline bool async_fork_gup_fast_defer(pmd_t pmd)
{
	return false;
}

static inline void async_fork_longterm_pin(struct mm_struct *mm)
{
}

#endif /* CONFIG_ASYNC_FORK */
#endif /* _LINUX_ASYNC_FORK_H */
