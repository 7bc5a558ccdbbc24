/* SPDX-License-Identifier: GPL-2.0 */
#undef TRACE_SYSTEM
#define TRACE_SYSTEM async_fork

#if !defined(_TRACE_ASYNC_FORK_H) || defined(TRACE_HEADER_MULTI_READ)
#define _TRACE_ASYNC_FORK_H

#include <linux/tracepoint.h>

#include <linux/async_fork.h>

TRACE_DEFINE_ENUM(AF_FALLBACK_LONGTERM_PIN);
TRACE_DEFINE_ENUM(AF_FALLBACK_NOMEM);
TRACE_DEFINE_ENUM(AF_FALLBACK_EMPTY);

/* A fork that asked for Async-fork and copied the page tables the default way. */
TRACE_EVENT(async_fork_fallback,
	    TP_PROTO(struct mm_struct *mm, enum async_fork_fallback reason),

	    TP_ARGS(mm, reason),

	    TP_STRUCT__entry(__field(struct mm_struct *, mm)
			     __field(int, reason)),

	    TP_fast_assign(__entry->mm = mm;
			   __entry->reason = reason;),

	    TP_printk("mm=%p reason=%s", __entry->mm,
		      __print_symbolic(__entry->reason,
				       { AF_FALLBACK_LONGTERM_PIN, "longterm_pin" },
				       { AF_FALLBACK_NOMEM, "nomem" },
				       { AF_FALLBACK_EMPTY, "nothing_to_defer" }))
);

/* fork() returned: @pmds PTE tables were left to the child. */
TRACE_EVENT(async_fork_start,
	    TP_PROTO(struct mm_struct *mm, struct mm_struct *child_mm,
		     unsigned int links, unsigned long pmds),

	    TP_ARGS(mm, child_mm, links, pmds),

	    TP_STRUCT__entry(__field(struct mm_struct *, mm)
			     __field(struct mm_struct *, child_mm)
			     __field(unsigned int, links)
			     __field(unsigned long, pmds)),

	    TP_fast_assign(__entry->mm = mm;
			   __entry->child_mm = child_mm;
			   __entry->links = links;
			   __entry->pmds = pmds;),

	    TP_printk("mm=%p child_mm=%p links=%u pmds=%lu", __entry->mm,
		      __entry->child_mm, __entry->links, __entry->pmds)
);

/*
 * @pmds PTE tables were copied before a change to [start, end) of one VMA
 * of @mm (@vma_wide: before a change to the VMA itself), in @duration_ns
 * including the wait for the other side's current batch.  @mm is the
 * parent's when the parent synchronized, the child's when the child's
 * memory was touched before its copy was done.
 */
TRACE_EVENT(async_fork_sync,
	    TP_PROTO(struct mm_struct *mm, unsigned long start, unsigned long end,
		     unsigned long pmds, bool vma_wide, u64 duration_ns),

	    TP_ARGS(mm, start, end, pmds, vma_wide, duration_ns),

	    TP_STRUCT__entry(__field(struct mm_struct *, mm)
			     __field(unsigned long, start)
			     __field(unsigned long, end)
			     __field(unsigned long, pmds)
			     __field(bool, vma_wide)
			     __field(u64, duration_ns)),

	    TP_fast_assign(__entry->mm = mm;
			   __entry->start = start;
			   __entry->end = end;
			   __entry->pmds = pmds;
			   __entry->vma_wide = vma_wide;
			   __entry->duration_ns = duration_ns;),

	    TP_printk("mm=%p range=%#lx-%#lx pmds=%lu vma_wide=%d duration_ns=%llu",
		      __entry->mm, __entry->start, __entry->end, __entry->pmds,
		      __entry->vma_wide, __entry->duration_ns)
);

/*
 * The child finished: it copied @pmds PTE tables itself, @duration_ns
 * after fork() began; @err is 0 or why the copy was abandoned.
 */
TRACE_EVENT(async_fork_child_done,
	    TP_PROTO(struct mm_struct *mm, unsigned long pmds,
		     unsigned int threads, u64 duration_ns, int err),

	    TP_ARGS(mm, pmds, threads, duration_ns, err),

	    TP_STRUCT__entry(__field(struct mm_struct *, mm)
			     __field(unsigned long, pmds)
			     __field(unsigned int, threads)
			     __field(u64, duration_ns)
			     __field(int, err)),

	    TP_fast_assign(__entry->mm = mm;
			   __entry->pmds = pmds;
			   __entry->threads = threads;
			   __entry->duration_ns = duration_ns;
			   __entry->err = err;),

	    TP_printk("child_mm=%p pmds=%lu threads=%u duration_ns=%llu err=%d",
		      __entry->mm, __entry->pmds, __entry->threads,
		      __entry->duration_ns, __entry->err)
);

#endif /* _TRACE_ASYNC_FORK_H */

/* This part must be outside protection */
#include <trace/define_trace.h>
