// SPDX-License-Identifier: GPL-2.0
/*
 * fork_stress: fork() again and again while other threads change the
 * process's memory every way they can, and check every snapshot.
 *
 * The memory is a few regions: 4 KiB anonymous pages, THP, a private file
 * mapping and the brk heap.  Worker threads pick random pieces of them and
 * write, munmap and map again, mremap (grow in place, shrink, move),
 * mprotect, madvise (DONTNEED, FREE, COLD, PAGEOUT, COLLAPSE, MERGEABLE),
 * mlock, move the break, vmsplice pages into a pipe and read a block device
 * into them with O_DIRECT (pins), and now and then fork.
 *
 * What a page holds follows from a tag kept in a table, so the table is
 * the snapshot: the forking thread writes it to a memfd while no other
 * thread is inside an operation, and the child compares its whole memory
 * with it, page by page, while the parent's threads go on.  Then the child
 * writes over its own memory, may fork a grandchild that checks the same
 * way, and checks itself again.  The parent checks every page before it
 * changes it and, every five seconds, all of them.
 *
 * Async-fork leaves to the child only the PTE tables of whole PMDs inside
 * one private anonymous VMA, so the two regions of 4 KiB pages, the
 * largest, are kept in such PMDs: they never shrink below two thirds of
 * their size, and once operations have left them split (a hole, a
 * read-only or mlocked run) more than MAX_SPLITS times, they are mended
 * into one VMA, copied afresh into their other slot if need be.  The other
 * regions fall into pieces as they may.  Every slot is PMD-aligned and
 * mremap() moves off the alignment one time in four.  The async_fork
 * counter is read around each of the parent's forks, and the run ends with
 * a line for harnesses to parse:
 *
 *   fork_stress: forks N, deferred D (P%), syncs S, child copies C, errors E
 *
 * Options put the kernel under pressure around the same run: a memcg limit
 * with zram swap, KSM and a fast khugepaged, page migration between NUMA
 * nodes, allocation failures injected into the Async-fork code (children
 * may then be killed, never the parent).  The seed is printed: it fixes
 * what each thread draws, not how the threads interleave.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kselftest.h"
#include "async_fork_snapshot.h"
#include "async_fork_knobs.h"

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE	25
#endif

#define PAGE		4096UL
#define WORDS		(PAGE / 8)
#define SZ_2M		(2UL << 20)
#define PAGES_2M	(SZ_2M / PAGE)
#define NR_REGIONS	6
#define MAX_SPLITS	2		/* splits an anon region may be left with: op_mend() */
#define MAX_WORKERS	16
#define MAX_DEPTH	2		/* a child and a grandchild check */
#define DEV_PAGES	256		/* the loop device read with O_DIRECT */
#define REPORTS		10		/* mismatches printed per process */

/*
 * Page tags.  A page with tag t >= TAG_KSM holds pattern(t, word); TAG_KSM
 * to TAG_KSM + 3 are shared by many pages (for KSM to merge), TAG_DEV + k is
 * the device's page k, tags from TAG_PARENT are the parent's writes and
 * tags with TAG_CHILD the children's.  MAYBE_ZERO: after MADV_FREE, the
 * page holds its tag's contents or zeros.
 */
#define TAG_ZERO	0ULL
#define TAG_FILE	1ULL		/* the file's page at the same index */
#define TAG_UNMAPPED	2ULL
#define TAG_KSM		16ULL
#define TAG_DEV		(1ULL << 40)
#define TAG_PARENT	(1ULL << 48)
#define TAG_CHILD	(1ULL << 62)
#define MAYBE_ZERO	(1ULL << 63)

enum kind { ANON, THP, FILE_PRIV, BRK };
static const char *const kind_name[] = { "anon", "thp", "file", "brk" };
static const enum kind kinds[NR_REGIONS] = { ANON, ANON, THP, THP, FILE_PRIV, BRK };
/*
 * The first region of 4 KiB pages refuses huge pages, so that its PMDs map
 * PTE tables, which Async-fork defers, whatever the system's THP setting
 * and MADV_COLLAPSE make of the others.
 */
static const int thp_advice[NR_REGIONS] = {
	MADV_NOHUGEPAGE, 0, MADV_HUGEPAGE, MADV_HUGEPAGE, 0, 0,
};

/*
 * A region lives in one of two reserved slots (PROT_NONE when unused), so
 * that it can grow in place and move without meeting anything else.  Both
 * slots are PMD-aligned.
 */
struct region {
	pthread_mutex_t lock;
	enum kind kind;
	char *slot[2];
	size_t slot_size;
	int cur;
	char *addr;
	size_t npages, maxpages;
	size_t splits;		/* ANON: VMA splits left since it was one VMA */
	int thp_advice;		/* MADV_HUGEPAGE, MADV_NOHUGEPAGE or 0 */
	int fd;			/* FILE_PRIV: maxpages of pattern(fseed) */
	uint64_t fseed;
	uint64_t *meta;		/* the tag of each page */
	uint64_t *hist;		/* the last operations on each page, see note() */
};

/* What a snapshot says of a region; its tags follow the headers. */
struct view {
	uint64_t addr, npages, kind, fseed;
};

enum op {
	OP_WRITE, OP_MUNMAP, OP_REMAP, OP_MREMAP, OP_MPROTECT, OP_DONTNEED,
	OP_FREE, OP_COLD, OP_PAGEOUT, OP_COLLAPSE, OP_MERGE, OP_MLOCK, OP_BRK,
	OP_VMSPLICE, OP_ODIRECT, OP_FORK, OP_MEND, NR_OPS
};
static const char *const op_name[NR_OPS] = {
	"write", "munmap", "remap", "mremap", "mprotect", "dontneed", "free",
	"cold", "pageout", "collapse", "merge", "mlock", "brk", "vmsplice",
	"odirect", "fork", "mend",
};
/* mend is never drawn: a region is mended when it is in too many pieces. */
static const int op_weight[NR_OPS] = {
	40, 4, 4, 4, 6, 4, 4, 2, 2, 2, 2, 4, 4, 4, 4, 3, 0,
};

struct worker {
	pthread_t th;
	uint64_t rng;
	int pipe[2];
};

static struct {
	uint64_t seed;
	int seconds, workers, children, mib, fail_pct, defer_pct;
	bool ksm, numa, odirect, expect_async, maps_debug;
	bool op_off[NR_OPS];
	int memcg_mib;
} opt = { .seconds = 30, .workers = 3, .children = 3, .mib = 32 };

static struct region regions[NR_REGIONS];
static struct worker workers[MAX_WORKERS];
static pthread_rwlock_t fork_lock;
static pthread_barrier_t start_barrier;
static atomic_bool stop;
static atomic_int outstanding;
static atomic_ulong next_tag = TAG_PARENT;
static atomic_long op_count[NR_OPS];
static atomic_long parent_bad, fork_failed;
static long forks, children_ok, children_bad, children_killed;
/* The parent's forks, counted under fork_lock: see fork_checker(). */
static long forks_made, forks_deferred, forks_fell_back, forks_empty;
static long maps_any, maps_small;
static int forks_fd = -1;	/* serializes fork() in the process tree */
static int reports_left = REPORTS;
static char *snapbuf;		/* where a child reads its snapshot */
static size_t snap_size;
static char *brk_base;
static int dev_fd = -1;		/* O_DIRECT reads of the loop device */
static int dev_back_fd = -1;	/* the memfd under it, read directly to compare */
/* The operation this thread is doing, for the pages' histories. */
static __thread enum op cur_op = OP_WRITE;

static uint64_t rnd(uint64_t *s)
{
	/* xorshift64* */
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dULL;
}

static size_t below(uint64_t *s, size_t n)
{
	return n ? rnd(s) % n : 0;
}

static uint64_t word_of(const struct view *v, size_t page, uint64_t tag, size_t w)
{
	tag &= ~MAYBE_ZERO;
	if (tag == TAG_ZERO)
		return 0;
	if (tag == TAG_FILE)
		return pattern(v->fseed, page * WORDS + w);
	return pattern(tag, w);
}

static void fill_page(const struct view *v, size_t page, uint64_t tag)
{
	uint64_t *p = (uint64_t *)(v->addr + page * PAGE);

	for (size_t w = 0; w < WORDS; w++)
		p[w] = word_of(v, page, tag, w);
}

static bool page_is_zero(const uint64_t *p)
{
	for (size_t w = 0; w < WORDS; w++)
		if (p[w])
			return false;
	return true;
}

/* A page's history, oldest first: "write free fork". */
static const char *history(uint64_t h)
{
	static __thread char buf[8 * 10];
	size_t len = 0;

	buf[0] = 0;
	for (int i = 7; i >= 0; i--) {
		unsigned int op = (h >> (8 * i)) & 0xff;

		if (op && op <= NR_OPS)
			len += snprintf(buf + len, sizeof(buf) - len, "%s%s",
					len ? " " : "", op_name[op - 1]);
	}
	return buf;
}

static pid_t top_pid;		/* the process the checkers are children of */

/*
 * How @pid maps @addr, for a difference's report: the /proc/PID/pagemap
 * entry (present, swapped, exclusive; the PFN for root) and the page's
 * /proc/kpageflags (KSM, THP, zero page, swap cache, dirty, ...).  With
 * read(2) only: no malloc() in a checker.
 */
static void describe_mapping(const char *who, pid_t pid, uintptr_t addr)
{
	uint64_t e = 0, flags = 0;
	char path[64];
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/pagemap", pid);
	fd = open(path, O_RDONLY);
	if (fd < 0 || pread(fd, &e, 8, (addr / PAGE) * 8) != 8) {
		if (fd >= 0)
			close(fd);
		return;
	}
	close(fd);
	if ((e >> 63) & 1) {
		fd = open("/proc/kpageflags", O_RDONLY);
		if (fd >= 0) {
			if (pread(fd, &flags, 8, (e & ((1ULL << 55) - 1)) * 8) != 8)
				flags = 0;
			close(fd);
		}
	}
	ksft_print_msg("  %s %d maps 0x%lx: pagemap 0x%016llx (present %d swap %d exclusive %d pfn/swap 0x%llx), kpageflags 0x%llx (ksm %d thp %d zero %d anon %d swapcache %d dirty %d)\n",
		       who, pid, (unsigned long)addr, (unsigned long long)e,
		       (int)(e >> 63) & 1, (int)(e >> 62) & 1, (int)(e >> 56) & 1,
		       (unsigned long long)(e & ((1ULL << 55) - 1)),
		       (unsigned long long)flags, (int)(flags >> 21) & 1,
		       (int)(flags >> 22) & 1, (int)(flags >> 24) & 1,
		       (int)(flags >> 12) & 1, (int)(flags >> 13) & 1,
		       (int)(flags >> 4) & 1);
}

/* Check page @page of @v against @tag; print the first difference. */
static bool check_page(const char *who, int r, const struct view *v,
		       size_t page, uint64_t tag)
{
	const uint64_t *p = (const uint64_t *)(v->addr + page * PAGE);
	size_t w;

	if (tag == TAG_UNMAPPED)
		return true;
	for (w = 0; w < WORDS; w++)
		if (p[w] != word_of(v, page, tag, w))
			break;
	if (w == WORDS || ((tag & MAYBE_ZERO) && page_is_zero(p)))
		return true;
	if (reports_left > 0) {
		reports_left--;
		ksft_print_msg("%s %d: region %d (%s) page %zu word %zu: 0x%016llx, expected 0x%016llx (tag 0x%llx; last operations: %s)\n",
			       who, getpid(), r, kind_name[v->kind], page, w,
			       (unsigned long long)p[w],
			       (unsigned long long)word_of(v, page, tag, w),
			       (unsigned long long)tag,
			       history(regions[r].hist[page]));
		describe_mapping("this process", getpid(), (uintptr_t)p);
		if (getpid() != top_pid)
			describe_mapping("the first parent", top_pid, (uintptr_t)p);
	}
	return false;
}

static struct view view_of(const struct region *r)
{
	return (struct view){ (uintptr_t)r->addr, r->npages, r->kind, r->fseed };
}

/* Check pages [first, first + n) of region @ri; returns how many differ. */
static long check_run(const char *who, int ri, size_t first, size_t n)
{
	struct region *r = &regions[ri];
	struct view v = view_of(r);
	long bad = 0;

	for (size_t i = first; i < first + n; i++)
		bad += !check_page(who, ri, &v, i, r->meta[i]);
	return bad;
}

static long check_all(const char *who)
{
	long bad = 0;

	for (int i = 0; i < NR_REGIONS; i++)
		bad += check_run(who, i, 0, regions[i].npages);
	return bad;
}

/*
 * Call @fn on each line of @path until it returns false, read with read(2)
 * into a buffer on the stack: stdio would malloc(), and malloc() may move
 * the break.  Returns false if @path cannot be opened.
 */
typedef bool line_fn(char *line, void *arg);

static bool read_lines(const char *path, line_fn *fn, void *arg)
{
	char buf[4096], *line, *nl;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t len = 0;
	ssize_t n;

	if (fd < 0)
		return false;
	while ((n = read(fd, buf + len, sizeof(buf) - 1 - len)) > 0) {
		len += n;
		buf[len] = 0;
		for (line = buf; (nl = strchr(line, '\n')); line = nl + 1) {
			*nl = 0;
			if (!fn(line, arg))
				goto out;
		}
		len -= line - buf;
		memmove(buf, line, len);
		if (len == sizeof(buf) - 1)	/* no line is that long */
			len = 0;
	}
out:
	close(fd);
	return true;
}

/* The Async-fork counters of /proc/vmstat, -1 for those the kernel lacks. */
enum { AF_FORKS, AF_SYNCS, AF_CHILD, AF_ERRORS, AF_FALLBACK, AF_EMPTY, NR_AF };
static const char *const af_name[NR_AF] = {
	"async_fork", "async_fork_pmd_sync", "async_fork_pmd_child", "async_fork_error",
	"async_fork_fallback", "async_fork_empty",
};

static bool af_line(char *line, void *arg)
{
	long *c = arg;
	char *val = strchr(line, ' ');

	if (val) {
		*val++ = 0;
		for (int i = 0; i < NR_AF; i++)
			if (!strcmp(line, af_name[i]))
				c[i] = strtol(val, NULL, 10);
	}
	return true;
}

static void read_af(long c[NR_AF])
{
	for (int i = 0; i < NR_AF; i++)
		c[i] = -1;
	read_lines("/proc/vmstat", af_line, c);
}

static bool moved(const long before[NR_AF], const long after[NR_AF], int i)
{
	return before[i] >= 0 && after[i] > before[i];
}

/*
 * One fork() at a time in the process tree (the parent's threads fork
 * under fork_lock, a child may fork a grandchild), so that a move of the
 * async_fork counter across one of the parent's forks is that fork's own:
 * a POSIX record lock, held by a process, not inherited by its child and
 * released when its holder dies.  Forks of other programs would still
 * count; nothing else forks in the test guest.
 */
static void lock_forks(short type)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_len = 1 };

	while (fcntl(forks_fd, F_SETLKW, &fl) && errno == EINTR)
		;
}

#define PMD_UP(x)	(((x) + SZ_2M - 1) & ~(SZ_2M - 1))
#define PMD_DOWN(x)	((x) & ~(SZ_2M - 1))

/* Is [lo, hi) inside one VMA? */
struct cover {
	uintptr_t lo, hi;
	bool one;
};

static bool vma_covers(char *line, void *arg)
{
	struct cover *c = arg;
	unsigned long start, end;

	if (sscanf(line, "%lx-%lx", &start, &end) == 2 && start <= c->lo && end >= c->hi) {
		c->one = true;
		return false;
	}
	return true;
}

static bool one_vma(const struct region *r)
{
	struct cover c = { (uintptr_t)r->addr, (uintptr_t)r->addr + r->npages * PAGE, false };

	read_lines("/proc/self/maps", vma_covers, &c);
	return c.one;
}

/*
 * -P (debug, for kernels without Async-fork): does /proc/self/smaps show a
 * whole PMD-aligned 2 MiB range of a region inside one private anonymous
 * VMA, more of them than the VMA has huge PMDs?  Async-fork defers such a
 * PMD if it maps a PTE table.  THP regions often map theirs huge: @small
 * says whether another region had one.
 */
struct pmd_scan {
	bool any, small;
	int whole[NR_REGIONS];	/* of the VMA being read */
	long huge;
};

static void scan_done(struct pmd_scan *s)
{
	int whole = 0;

	for (int i = 0; i < NR_REGIONS; i++)
		whole += s->whole[i];
	if (whole * (long)(SZ_2M >> 10) > s->huge)
		for (int i = 0; i < NR_REGIONS; i++)
			if (s->whole[i]) {
				s->any = true;
				s->small |= regions[i].kind != THP;
			}
	memset(s->whole, 0, sizeof(s->whole));
	s->huge = 0;
}

static bool scan_vma(char *line, void *arg)
{
	struct pmd_scan *s = arg;
	unsigned long start, end, ino;
	char perms[8];

	if (!line) {
		scan_done(s);
		return false;
	}
	if (sscanf(line, "AnonHugePages: %ld", &s->huge) == 1 ||
	    sscanf(line, "%lx-%lx %7s %*x %*s %lu", &start, &end, perms, &ino) != 4)
		return true;
	scan_done(s);
	if (ino || perms[3] != 'p' || !strncmp(perms, "---", 3))
		return true;
	for (int i = 0; i < NR_REGIONS; i++) {
		const struct region *r = &regions[i];
		uintptr_t lo = (uintptr_t)r->addr, hi = lo + r->npages * PAGE;

		lo = PMD_UP(lo > start ? lo : start);
		hi = PMD_DOWN(hi < end ? hi : end);
		s->whole[i] = lo < hi ? (hi - lo) / SZ_2M : 0;
	}
	return true;
}

static uint64_t new_tag(uint64_t *rng)
{
	if (opt.ksm && !below(rng, 4))
		return TAG_KSM + below(rng, 4);
	return atomic_fetch_add(&next_tag, 1);
}

static uint64_t fresh_tag(const struct region *r)
{
	return r->kind == FILE_PRIV ? TAG_FILE : TAG_ZERO;
}

/*
 * Add the current operation to the history of pages [first, first + n):
 * the last eight, a byte each, newest lowest, printed with a mismatch.
 */
static void note(struct region *r, size_t first, size_t n)
{
	for (size_t i = first; i < first + n && i < r->maxpages; i++)
		r->hist[i] = r->hist[i] << 8 | (cur_op + 1);
}

static void set_tags(struct region *r, size_t first, size_t n, uint64_t tag)
{
	for (size_t i = first; i < first + n; i++)
		r->meta[i] = tag;
	note(r, first, n);
}

/* A random run of at most @max mapped pages, or 0. */
static size_t pick_run(struct region *r, uint64_t *rng, size_t max, size_t *first)
{
	size_t i = below(rng, r->npages), n = 0;

	*first = i;
	while (n < max && i + n < r->npages && r->meta[i + n] != TAG_UNMAPPED)
		n++;
	return n;
}

static char *page_addr(struct region *r, size_t i)
{
	return r->addr + i * PAGE;
}

static bool reserve(char *addr, size_t len)
{
	return mmap(addr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS |
		    MAP_FIXED | MAP_NORESERVE, -1, 0) == addr;
}

/* Map pages [first, first + n) afresh: zeros, or the file's pages. */
static bool map_pages(struct region *r, size_t first, size_t n)
{
	char *want = page_addr(r, first);
	int prot = PROT_READ | PROT_WRITE;
	char *p;

	if (r->kind == FILE_PRIV)
		p = mmap(want, n * PAGE, prot, MAP_PRIVATE | MAP_FIXED, r->fd,
			 first * PAGE);
	else
		p = mmap(want, n * PAGE, prot,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	if (p != want)
		return false;
	if (r->thp_advice)
		madvise(p, n * PAGE, r->thp_advice);
	if (opt.ksm)
		madvise(p, n * PAGE, MADV_MERGEABLE);
	set_tags(r, first, n, fresh_tag(r));
	return true;
}

static bool op_write(struct worker *w, struct region *r, int ri)
{
	size_t first, n = pick_run(r, &w->rng, 32, &first);
	struct view v = view_of(r);

	if (!n || mprotect(page_addr(r, first), n * PAGE, PROT_READ | PROT_WRITE))
		return false;
	atomic_fetch_add(&parent_bad, check_run("parent", ri, first, n));
	for (size_t i = first; i < first + n; i++) {
		r->meta[i] = new_tag(&w->rng);
		fill_page(&v, i, r->meta[i]);
	}
	note(r, first, n);
	return true;
}

static bool op_munmap(struct worker *w, struct region *r, int ri)
{
	size_t first, n = pick_run(r, &w->rng, 16, &first);

	if (!n || r->kind == BRK || munmap(page_addr(r, first), n * PAGE))
		return false;
	set_tags(r, first, n, TAG_UNMAPPED);
	r->splits++;
	return true;
}

/* Map every hole of @r again. */
static bool op_remap(struct worker *w, struct region *r, int ri)
{
	bool done = true;

	for (size_t i = 0; i < r->npages; i++) {
		size_t n = 0;

		while (i + n < r->npages && r->meta[i + n] == TAG_UNMAPPED)
			n++;
		if (n && !map_pages(r, i, n))
			done = false;
		i += n;
	}
	return done;
}

/*
 * The fewest pages a region keeps: two thirds for those of 4 KiB pages, in
 * whole PMDs, for Async-fork to defer; a page for the others.
 */
static size_t min_pages(const struct region *r)
{
	size_t n = r->maxpages * 2 / 3 / PAGES_2M * PAGES_2M;

	return r->kind == ANON && n ? n : 1;
}

static bool grow_tail(struct region *r, size_t newn)
{
	size_t oldn = r->npages;

	set_tags(r, oldn, newn - oldn, fresh_tag(r));
	r->npages = newn;
	return true;
}

static bool op_mremap(struct worker *w, struct region *r, int ri)
{
	size_t len = r->npages * PAGE, newn;
	char *to, *p;

	if (r->kind == BRK || !op_remap(w, r, ri))
		return false;
	note(r, 0, r->npages);
	/* Same flags everywhere, so that the VMAs merge into one. */
	munlock(r->addr, len);
	if (mprotect(r->addr, len, PROT_READ | PROT_WRITE))
		return false;
	switch (below(&w->rng, 3)) {
	case 0:
		/* shrink, not below min_pages() */
		if (r->npages <= min_pages(r))
			return false;
		newn = min_pages(r) + below(&w->rng, r->npages - min_pages(r));
		if (mremap(r->addr, len, newn * PAGE, 0) != r->addr)
			return false;
		reserve(page_addr(r, newn), len - newn * PAGE);
		r->npages = newn;
		return true;
	case 1:
		/* grow in place */
		if (r->npages == r->maxpages)
			return false;
		newn = r->npages + 1 + below(&w->rng, r->maxpages - r->npages);
		munmap(r->addr + len, newn * PAGE - len);
		if (mremap(r->addr, len, newn * PAGE, 0) != r->addr) {
			reserve(r->addr + len, newn * PAGE - len);
			return false;
		}
		/* Only one VMA grows: the region is whole. */
		r->splits = 0;
		return grow_tail(r, newn);
	default:
		/*
		 * Move to the other slot, one time in four a page off the PMD
		 * alignment: the region then has partial PMDs at both ends,
		 * copied at fork, and whole ones between them if it is large.
		 */
		newn = r->npages + below(&w->rng, r->maxpages - r->npages + 1);
		to = r->slot[!r->cur] + !below(&w->rng, 4) * PAGE;
		p = mremap(r->addr, len, newn * PAGE, MREMAP_MAYMOVE | MREMAP_FIXED, to);
		if (p != to) {
			reserve(to, newn * PAGE);
			return false;
		}
		reserve(r->slot[r->cur], r->slot_size);
		r->cur = !r->cur;
		r->addr = to;
		r->splits = 0;
		return grow_tail(r, newn);
	}
}

/*
 * mprotect() and mlock() split VMAs; half the time they are undone at once
 * (split, then merge), and the pieces left are counted for op_mend().
 */
static bool op_mprotect(struct worker *w, struct region *r, int ri)
{
	size_t first, n = pick_run(r, &w->rng, 64, &first);
	char *p = page_addr(r, first);

	if (!n || mprotect(p, n * PAGE, PROT_READ))
		return false;
	note(r, first, n);
	if (!below(&w->rng, 2))
		return !mprotect(p, n * PAGE, PROT_READ | PROT_WRITE);
	r->splits++;
	return true;
}

/* madvise() a run; DONTNEED and FREE change what the pages hold. */
static bool advise(struct worker *w, struct region *r, int advice)
{
	size_t first, n = pick_run(r, &w->rng, 64, &first);
	char *p = page_addr(r, first);

	if (!n)
		return false;
	/* LRU and discard advice refuse mlocked VMAs. */
	munlock(p, n * PAGE);
	if (madvise(p, n * PAGE, advice))
		return false;
	if (advice == MADV_DONTNEED)
		set_tags(r, first, n, fresh_tag(r));
	else
		note(r, first, n);
	if (advice == MADV_FREE)
		for (size_t i = first; i < first + n; i++)
			r->meta[i] |= r->meta[i] ? MAYBE_ZERO : 0;
	return true;
}

static bool op_collapse(struct worker *w, struct region *r, int ri)
{
	uintptr_t a = (uintptr_t)page_addr(r, below(&w->rng, r->npages)) & ~(SZ_2M - 1);
	size_t first;

	if (r->kind == FILE_PRIV || a < (uintptr_t)r->addr)
		return false;
	first = (a - (uintptr_t)r->addr) / PAGE;
	if (first + PAGES_2M > r->npages)
		return false;
	for (size_t i = first; i < first + PAGES_2M; i++)
		if (r->meta[i] == TAG_UNMAPPED)
			return false;
	note(r, first, PAGES_2M);
	return !madvise((void *)a, SZ_2M, MADV_COLLAPSE);
}

static bool op_merge(struct worker *w, struct region *r, int ri)
{
	size_t first, n = pick_run(r, &w->rng, r->npages, &first);

	if (!opt.ksm || !n)
		return false;
	note(r, first, n);
	r->splits += n < r->npages;
	return !madvise(page_addr(r, first), n * PAGE,
			below(&w->rng, 4) ? MADV_MERGEABLE : MADV_UNMERGEABLE);
}

static bool op_mlock(struct worker *w, struct region *r, int ri)
{
	size_t first, n = pick_run(r, &w->rng, 64, &first);

	if (!n || mlock(page_addr(r, first), n * PAGE))
		return false;
	note(r, first, n);
	if (!below(&w->rng, 2))
		return !munlock(page_addr(r, first), n * PAGE);
	r->splits++;
	return true;
}

static bool op_brk(struct worker *w, struct region *r, int ri)
{
	size_t newn = min_pages(r) + below(&w->rng, r->maxpages - min_pages(r) + 1);

	if (r->kind != BRK || brk(r->addr + newn * PAGE))
		return false;
	if (newn > r->npages)
		return grow_tail(r, newn);
	r->npages = newn;
	return true;
}

/*
 * Start @r afresh in its other slot, PMD-aligned and one VMA: its pages are
 * copied there, wrong ones included (for the checks to find), and its holes
 * become zero pages.
 */
static bool renew(struct region *r, int ri)
{
	char *to = r->slot[!r->cur];
	size_t n = r->npages;

	if (mmap(to, n * PAGE, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != to) {
		reserve(to, r->slot_size);
		return false;
	}
	if (r->thp_advice)
		madvise(to, n * PAGE, r->thp_advice);
	if (opt.ksm)
		madvise(to, n * PAGE, MADV_MERGEABLE);
	for (size_t i = 0; i < n; i++) {
		if (r->meta[i] == TAG_UNMAPPED)
			r->meta[i] = TAG_ZERO;
		else
			memcpy(to + i * PAGE, page_addr(r, i), PAGE);
	}
	reserve(r->slot[r->cur], r->slot_size);
	r->cur = !r->cur;
	r->addr = to;
	note(r, 0, n);
	return true;
}

/*
 * A region of 4 KiB pages left with more than MAX_SPLITS splits is made one
 * VMA again, so that it keeps whole PMDs for Async-fork to defer (the other
 * regions are left in pieces, as many as the operations make): its holes
 * are mapped, mprotect(), mlock() and MADV_UNMERGEABLE undone over all of
 * it, and its pieces merge.  If they do not, it starts afresh (renew()):
 * after an mremap() move, a hole mapped again does not continue its
 * neighbours' vm_pgoff and stays apart.
 */
static bool op_mend(struct worker *w, struct region *r, int ri)
{
	size_t len = r->npages * PAGE;

	r->splits = 0;
	op_remap(w, r, ri);
	munlock(r->addr, len);
	if (mprotect(r->addr, len, PROT_READ | PROT_WRITE))
		return false;
	if (opt.ksm)
		madvise(r->addr, len, MADV_MERGEABLE);
	note(r, 0, r->npages);
	return one_vma(r) || renew(r, ri);
}

/* Leave a run in the worker's pipe: page references across forks. */
static bool op_vmsplice(struct worker *w, struct region *r, int ri)
{
	static char sink[16 * PAGE];
	size_t first, n = pick_run(r, &w->rng, 16, &first);
	struct iovec iov = { page_addr(r, first), n * PAGE };

	while (read(w->pipe[0], sink, sizeof(sink)) > 0)
		;
	note(r, first, n);
	return n && vmsplice(w->pipe[1], &iov, 1, SPLICE_F_NONBLOCK) > 0;
}

/* Read device pages into a run with O_DIRECT: the pages are pinned. */
static bool op_odirect(struct worker *w, struct region *r, int ri)
{
	size_t first, n = pick_run(r, &w->rng, 16, &first), k;
	ssize_t got;

	if (dev_fd < 0 || !n ||
	    mprotect(page_addr(r, first), n * PAGE, PROT_READ | PROT_WRITE))
		return false;
	atomic_fetch_add(&parent_bad, check_run("parent", ri, first, n));
	k = below(&w->rng, DEV_PAGES - n + 1);
	got = pread(dev_fd, page_addr(r, first), n * PAGE, k * PAGE);
	if (got != (ssize_t)(n * PAGE)) {
		ksft_print_msg("O_DIRECT read of %zu pages: %zd (%s)\n", n, got,
			       strerror(errno));
		atomic_fetch_add(&parent_bad, 1);
		return false;
	}
	for (size_t i = 0; i < n; i++)
		r->meta[first + i] = TAG_DEV + k + i;
	note(r, first, n);
	/*
	 * The data must be there at once.  If not, say where it went wrong:
	 * the device read again (O_DIRECT into a buffer of our own) and the
	 * memfd under it read directly.
	 */
	if (check_run("odirect", ri, first, n)) {
		static char buf[16 * PAGE] __attribute__((aligned(PAGE)));
		const uint64_t *d = (const uint64_t *)buf;
		uint64_t want = pattern(TAG_DEV + k, 0);
		ssize_t again = pread(dev_fd, buf, PAGE, k * PAGE);

		ksft_print_msg("odirect: %zu pages from device page %zu into region %d page %zu: device again 0x%016llx (%zd bytes), memfd 0x%016llx, expected 0x%016llx\n",
			       n, k, ri, first, (unsigned long long)(again == PAGE ? d[0] : 0),
			       again, (unsigned long long)(pread(dev_back_fd, buf + PAGE, PAGE, k * PAGE) == PAGE ? d[WORDS] : 0),
			       (unsigned long long)want);
		atomic_fetch_add(&parent_bad, 1);
	}
	return true;
}

/* The snapshot: every region's view and tags, in a new memfd. */
static int write_snapshot(void)
{
	int fd = memfd_create("fork_stress_snapshot", 0);
	off_t off = NR_REGIONS * sizeof(struct view);

	if (fd < 0)
		return -1;
	for (int i = 0; i < NR_REGIONS; i++) {
		struct view v = view_of(&regions[i]);
		size_t len = v.npages * sizeof(uint64_t);

		if (pwrite(fd, &v, sizeof(v), i * sizeof(v)) != sizeof(v) ||
		    pwrite(fd, regions[i].meta, len, off) != (ssize_t)len) {
			close(fd);
			return -1;
		}
		off += len;
	}
	return fd;
}

/*
 * A child's exit codes beyond 0 and its own failures (1-3): everything it
 * checked was exact, and its own fork of a grandchild failed (injected), or
 * the grandchild was killed by a failed copy.  The top counts both, so that
 * an async_fork_error of a grandchild's copy is accounted for.
 */
#define EXIT_GRANDCHILD_KILLED	10
#define EXIT_GRANDCHILD_NO_FORK	11

static bool child_status_ok(int status, long *killed)
{
	if (WIFEXITED(status) && !WEXITSTATUS(status))
		return true;
	if (!opt.fail_pct)
		return false;
	/* A copy that failed (injected) kills the child, never the parent. */
	if ((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) ||
	    (WIFEXITED(status) && WEXITSTATUS(status) == EXIT_GRANDCHILD_KILLED)) {
		(*killed)++;
		return true;
	}
	if (WIFEXITED(status) && WEXITSTATUS(status) == EXIT_GRANDCHILD_NO_FORK) {
		atomic_fetch_add(&fork_failed, 1);
		return true;
	}
	return false;
}

static void __noreturn child_main(int fd, int depth, uint64_t rng);

/*
 * Fork a checker of the current memory; the caller holds fork_lock.  The
 * parent's forks (depth 1) count as deferred if the async_fork counter
 * moved across them (see lock_forks()).
 */
static pid_t fork_checker(int depth, uint64_t rng)
{
	int fd = write_snapshot();
	long before[NR_AF], after[NR_AF];
	struct pmd_scan scan = { 0 };
	pid_t pid;

	if (fd < 0)
		return -1;
	cur_op = OP_FORK;
	for (int i = 0; i < NR_REGIONS; i++)
		note(&regions[i], 0, regions[i].npages);
	lock_forks(F_WRLCK);
	if (depth == 1) {
		read_af(before);
		if (opt.maps_debug) {
			read_lines("/proc/self/smaps", scan_vma, &scan);
			scan_vma(NULL, &scan);
		}
	}
	pid = fork();
	if (pid == 0)
		child_main(fd, depth, rng);
	if (depth == 1)
		read_af(after);
	lock_forks(F_UNLCK);
	close(fd);
	if (depth == 1 && pid > 0) {
		forks_made++;
		forks_deferred += moved(before, after, AF_FORKS);
		forks_fell_back += moved(before, after, AF_FALLBACK);
		forks_empty += moved(before, after, AF_EMPTY);
		maps_any += scan.any;
		maps_small += scan.small;
	}
	return pid;
}

/* Compare memory with the snapshot in @fd, then with the child's own table. */
static long check_snapshot(int fd)
{
	struct view *v = (struct view *)snapbuf;
	uint64_t *tags = (uint64_t *)(v + NR_REGIONS);
	size_t done = 0;
	long bad = 0;
	ssize_t n;

	while ((n = pread(fd, snapbuf + done, snap_size - done, done)) > 0)
		done += n;
	for (int i = 0; i < NR_REGIONS; i++) {
		struct view own = view_of(&regions[i]);

		if (memcmp(&own, &v[i], sizeof(own)) ||
		    memcmp(regions[i].meta, tags, v[i].npages * sizeof(*tags))) {
			ksft_print_msg("child %d: region %d: its table differs from the snapshot\n",
				       getpid(), i);
			bad++;
		}
		for (size_t p = 0; p < v[i].npages; p++)
			bad += !check_page("child", i, &v[i], p, tags[p]);
		tags += v[i].npages;
	}
	return bad;
}

/* The child: check the snapshot, change it, check again. */
static void child_main(int fd, int depth, uint64_t rng)
{
	uint64_t tag = TAG_CHILD | ((uint64_t)getpid() << 24);
	long bad = check_snapshot(fd), killed = 0;
	bool forked = false;
	pid_t pid = -1;
	int status;

	close(fd);
	if (bad)
		_exit(1);
	if (depth < MAX_DEPTH && below(&rng, 2)) {
		pid = fork_checker(depth + 1, rnd(&rng));
		forked = true;
	}
	for (int i = 0; i < NR_REGIONS; i++) {
		struct region *r = &regions[i];
		struct view v = view_of(r);

		for (size_t p = 0; p < r->npages; p++) {
			size_t n = 0;

			while (p + n < r->npages && r->meta[p + n] != TAG_UNMAPPED)
				n++;
			if (n && mprotect(page_addr(r, p), n * PAGE, PROT_READ | PROT_WRITE))
				_exit(3);
			for (; n; n--, p++) {
				if (below(&rng, 4)) {
					r->meta[p] = tag++;
					fill_page(&v, p, r->meta[p]);
					cur_op = OP_WRITE;
					note(r, p, 1);
				}
			}
		}
	}
	bad = check_all("child");
	if (pid > 0 && (waitpid(pid, &status, 0) != pid ||
			!child_status_ok(status, &killed)))
		bad++;
	if (bad)
		_exit(1);
	if (killed)
		_exit(EXIT_GRANDCHILD_KILLED);
	_exit(forked && pid < 0 ? EXIT_GRANDCHILD_NO_FORK : 0);
}

static bool op_fork(struct worker *w)
{
	pid_t pid;

	if (atomic_load(&outstanding) >= opt.children) {
		usleep(2000);
		return false;
	}
	pthread_rwlock_wrlock(&fork_lock);
	pid = fork_checker(1, rnd(&w->rng));
	pthread_rwlock_unlock(&fork_lock);
	if (pid < 0) {
		atomic_fetch_add(&fork_failed, 1);
		return false;
	}
	atomic_fetch_add(&outstanding, 1);
	return true;
}

static bool run_op(enum op op, struct worker *w, struct region *r, int ri)
{
	switch (op) {
	case OP_WRITE:
		return op_write(w, r, ri);
	case OP_MUNMAP:
		return op_munmap(w, r, ri);
	case OP_REMAP:
		return op_remap(w, r, ri);
	case OP_MREMAP:
		return op_mremap(w, r, ri);
	case OP_MPROTECT:
		return op_mprotect(w, r, ri);
	case OP_DONTNEED:
		return advise(w, r, MADV_DONTNEED);
	case OP_FREE:
		return r->kind != FILE_PRIV && advise(w, r, MADV_FREE);
	case OP_COLD:
		return advise(w, r, MADV_COLD);
	case OP_PAGEOUT:
		return advise(w, r, MADV_PAGEOUT);
	case OP_COLLAPSE:
		return op_collapse(w, r, ri);
	case OP_MERGE:
		return op_merge(w, r, ri);
	case OP_MLOCK:
		return op_mlock(w, r, ri);
	case OP_BRK:
		return op_brk(w, r, ri);
	case OP_VMSPLICE:
		return op_vmsplice(w, r, ri);
	case OP_ODIRECT:
		return op_odirect(w, r, ri);
	default:
		return false;
	}
}

static enum op pick_op(uint64_t *rng)
{
	int total = 0, x;

	for (int i = 0; i < NR_OPS; i++)
		total += opt.op_off[i] ? 0 : op_weight[i];
	x = below(rng, total);
	for (int i = 0; i < NR_OPS; i++) {
		x -= opt.op_off[i] ? 0 : op_weight[i];
		if (x < 0)
			return i;
	}
	return OP_WRITE;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	pthread_barrier_wait(&start_barrier);
	while (!atomic_load(&stop)) {
		enum op op = pick_op(&w->rng);
		int ri = below(&w->rng, NR_REGIONS);
		struct region *r = &regions[ri];
		bool done;

		if (op == OP_FORK) {
			done = op_fork(w);
		} else {
			pthread_rwlock_rdlock(&fork_lock);
			pthread_mutex_lock(&r->lock);
			if (r->kind == ANON && r->splits > MAX_SPLITS &&
			    !opt.op_off[OP_MEND]) {
				cur_op = OP_MEND;
				if (op_mend(w, r, ri))
					atomic_fetch_add(&op_count[OP_MEND], 1);
			}
			cur_op = op;
			done = run_op(op, w, r, ri);
			pthread_mutex_unlock(&r->lock);
			pthread_rwlock_unlock(&fork_lock);
		}
		if (done)
			atomic_fetch_add(&op_count[op], 1);
	}
	return NULL;
}

/* Move every page of the process to the other NUMA node, again and again. */
static void *migrator_main(void *arg)
{
	unsigned long nodes[2] = { 1, 2 };
	int i = 0;

	pthread_barrier_wait(&start_barrier);
	while (!atomic_load(&stop)) {
		syscall(SYS_migrate_pages, 0, 8 * sizeof(long) + 1,
			&nodes[i], &nodes[!i]);
		i = !i;
		sleep(1);
	}
	return NULL;
}

static void setup_region(struct region *r, enum kind kind, int advice,
			 size_t maxpages, uint64_t *rng)
{
	char *res;

	pthread_mutex_init(&r->lock, NULL);
	r->kind = kind;
	r->thp_advice = advice;
	r->maxpages = maxpages;
	r->npages = maxpages / 2 + below(rng, maxpages / 2);
	if (r->npages < min_pages(r))
		r->npages = min_pages(r);
	r->fseed = rnd(rng);
	r->fd = -1;
	r->meta = mmap(NULL, maxpages * sizeof(uint64_t), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	r->hist = mmap(NULL, maxpages * sizeof(uint64_t), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (r->meta == MAP_FAILED || r->hist == MAP_FAILED)
		ksft_exit_fail_perror("mmap");
	if (kind == BRK) {
		r->addr = brk_base;
		if (brk(r->addr + r->npages * PAGE))
			ksft_exit_fail_perror("brk");
		set_tags(r, 0, r->npages, TAG_ZERO);
	} else {
		/* Two slots, each with a spare 2M for an unaligned move. */
		r->slot_size = maxpages * PAGE + SZ_2M;
		res = mmap(NULL, 2 * r->slot_size + SZ_2M, PROT_NONE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (res == MAP_FAILED)
			ksft_exit_fail_perror("mmap");
		r->slot[0] = (char *)(((uintptr_t)res + SZ_2M - 1) & ~(SZ_2M - 1));
		r->slot[1] = r->slot[0] + r->slot_size;
		r->addr = r->slot[0];
		if (kind == FILE_PRIV) {
			struct view v = { 0, maxpages, kind, r->fseed };
			uint64_t page[WORDS];

			r->fd = memfd_create("fork_stress_file", 0);
			if (r->fd < 0)
				ksft_exit_fail_perror("memfd_create");
			for (size_t i = 0; i < maxpages; i++) {
				for (size_t w = 0; w < WORDS; w++)
					page[w] = word_of(&v, i, TAG_FILE, w);
				if (pwrite(r->fd, page, PAGE, i * PAGE) != PAGE)
					ksft_exit_fail_perror("pwrite");
			}
		}
		if (!map_pages(r, 0, r->npages))
			ksft_exit_fail_perror("mmap");
	}
	/* Write most pages, so that there is something to copy. */
	for (size_t i = 0; i < r->npages; i++) {
		struct view v = view_of(r);

		if (below(rng, 8)) {
			r->meta[i] = new_tag(rng);
			fill_page(&v, i, r->meta[i]);
		}
	}
}

/* Kernel settings this run changes, with their values before it. */
static struct knob {
	const char *path;
	long value, old;
} knobs[] = {
	{ "/sys/kernel/mm/ksm/pages_to_scan", 1000, -1 },
	{ "/sys/kernel/mm/ksm/sleep_millisecs", 50, -1 },
	{ "/sys/kernel/mm/ksm/run", 1, -1 },
	{ "/sys/kernel/mm/transparent_hugepage/khugepaged/scan_sleep_millisecs", 100, -1 },
	{ "/sys/kernel/mm/transparent_hugepage/khugepaged/alloc_sleep_millisecs", 100, -1 },
	{ "/sys/kernel/mm/transparent_hugepage/khugepaged/pages_to_scan", 4096, -1 },
};

static void set_knobs(void)
{
	for (size_t i = 0; i < ARRAY_SIZE(knobs); i++) {
		knobs[i].old = read_long(knobs[i].path);
		if (knobs[i].old < 0 || write_long(knobs[i].path, knobs[i].value))
			ksft_exit_fail_msg("cannot set %s\n", knobs[i].path);
	}
}

static void restore_knobs(void)
{
	/* Unmerge what KSM merged before it stops. */
	write_long("/sys/kernel/mm/ksm/run", 2);
	for (size_t i = 0; i < ARRAY_SIZE(knobs); i++)
		if (knobs[i].old >= 0)
			write_long(knobs[i].path, knobs[i].old);
}

#define CGROUP	"/sys/fs/cgroup/fork_stress"

static void enter_memcg(void)
{
	char buf[32];

	/* Without swap, the limit would only mean OOM kills. */
	if (meminfo_kb("SwapTotal") <= 0)
		ksft_exit_fail_msg("-g needs swap (the test suite puts it on zram0)\n");
	af_write_file("/sys/fs/cgroup/cgroup.subtree_control", "+memory");
	if (mkdir(CGROUP, 0755) && errno != EEXIST)
		ksft_exit_fail_perror("mkdir " CGROUP);
	snprintf(buf, sizeof(buf), "%dM", opt.memcg_mib);
	if (af_write_file(CGROUP "/memory.max", buf))
		ksft_exit_fail_msg("cannot limit " CGROUP " to %s\n", buf);
	snprintf(buf, sizeof(buf), "%d", getpid());
	if (af_write_file(CGROUP "/cgroup.procs", buf))
		ksft_exit_fail_msg("cannot move into " CGROUP "\n");
}

static void leave_memcg(void)
{
	char buf[32];

	snprintf(buf, sizeof(buf), "%d", getpid());
	af_write_file("/sys/fs/cgroup/cgroup.procs", buf);
	rmdir(CGROUP);
}

/* A loop device over a memfd of DEV_PAGES pattern pages; opened O_DIRECT. */
static int loop_ctl = -1, loop_nr = -1, loop_fd = -1;

static void loop_setup(void)
{
	char path[32];
	uint64_t page[WORDS];
	int back;

	loop_ctl = open("/dev/loop-control", O_RDWR);
	loop_nr = loop_ctl < 0 ? -1 : ioctl(loop_ctl, LOOP_CTL_GET_FREE);
	back = memfd_create("fork_stress_dev", 0);
	if (loop_nr < 0 || back < 0)
		ksft_exit_fail_msg("no loop device: %s\n", strerror(errno));
	for (size_t k = 0; k < DEV_PAGES; k++) {
		for (size_t w = 0; w < WORDS; w++)
			page[w] = pattern(TAG_DEV + k, w);
		if (pwrite(back, page, PAGE, k * PAGE) != PAGE)
			ksft_exit_fail_perror("pwrite");
	}
	snprintf(path, sizeof(path), "/dev/loop%d", loop_nr);
	loop_fd = open(path, O_RDWR);
	if (loop_fd < 0 || ioctl(loop_fd, LOOP_SET_FD, back))
		ksft_exit_fail_msg("%s: %s\n", path, strerror(errno));
	dev_back_fd = back;
	dev_fd = open(path, O_RDONLY | O_DIRECT);
	if (dev_fd < 0)
		ksft_exit_fail_msg("%s with O_DIRECT: %s\n", path, strerror(errno));
}

static void loop_teardown(void)
{
	close(dev_fd);
	dev_fd = -1;
	ioctl(loop_fd, LOOP_CLR_FD);
	close(loop_fd);
	close(dev_back_fd);
	close(loop_ctl);
}

/*
 * Where allocations fail with -F: at fork (the parent's copy, rolled back),
 * in the child's copy and its helpers, and in a synchronization (the
 * parent's, or the child's on-demand copy).  One site at a time, in turn,
 * each a function of mm/async_fork.c (the stack filter takes one range).
 */
static const char *const fault_sites[] = {
	"async_fork_copy_page_range", "af_copy_chunks", "af_sync",
};
static unsigned long fault_range[ARRAY_SIZE(fault_sites)][2];
static int nr_fault_sites, fault_site;
static const char *fault_name;

static int is_fault_site(const char *name)
{
	return !strcmp(name, fault_name);
}

static void find_fault_sites(void)
{
	for (size_t i = 0; i < ARRAY_SIZE(fault_sites); i++) {
		unsigned long *r = fault_range[nr_fault_sites];

		fault_name = fault_sites[i];
		if (code_range(is_fault_site, &r[0], &r[1]) != 1) {
			ksft_print_msg("%s is not in /proc/kallsyms (inlined?)\n", fault_name);
			continue;
		}
		ksft_print_msg("fault site %s: [%#lx, %#lx)\n", fault_name, r[0], r[1]);
		nr_fault_sites++;
	}
	if (!nr_fault_sites)
		ksft_exit_fail_msg("no Async-fork function in /proc/kallsyms\n");
	if (access(FAIL_ALLOC "require-start", W_OK) || access(FAIL_SLAB "require-start", W_OK))
		ksft_exit_fail_msg("no fault injection with a stack filter in debugfs\n");
}

static void next_fault_site(void)
{
	unsigned long *r = fault_range[fault_site++ % nr_fault_sites];

	inject_failures(FAIL_ALLOC, r[0], r[1], opt.fail_pct);
	inject_failures(FAIL_SLAB, r[0], r[1], opt.fail_pct);
}

static void reap(bool block)
{
	int status;
	pid_t pid;

	while ((pid = waitpid(-1, &status, block ? 0 : WNOHANG)) > 0) {
		atomic_fetch_sub(&outstanding, 1);
		forks++;
		if (!child_status_ok(status, &children_killed)) {
			ksft_print_msg("child %d: %s %d\n", pid,
				       WIFEXITED(status) ? "exit" : "signal",
				       WIFEXITED(status) ? WEXITSTATUS(status) :
				       WTERMSIG(status));
			children_bad++;
		} else {
			children_ok++;
		}
	}
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void usage(const char *prog)
{
	fprintf(stderr,
		"usage: %s [-s SEED] [-t SECONDS] [-j WORKERS] [-c CHILDREN] [-m MIB]\n"
		"          [-g MEMCG_MIB] [-F PERCENT] [-k] [-n] [-d] [-a] [-D PERCENT] [-P]\n"
		"          [-x OP,...]\n"
		"  -g  run in a memory cgroup limited to MEMCG_MIB (needs swap)\n"
		"  -F  fail PERCENT%% of Async-fork's allocations (children may be killed,\n"
		"      forks fail)\n"
		"  -k  KSM on, khugepaged fast   -n  migrate between NUMA nodes 0 and 1\n"
		"  -d  O_DIRECT reads from a loop device into the memory (pins)\n"
		"  -a  the forks must be asynchronous (vm.async_fork=2)\n"
		"  -D  with -a, at least PERCENT%% of the forks must defer page tables\n"
		"      (one fork excepted, and those that fell back for want of memory)\n"
		"  -P  debug: count the forks at which /proc/self/smaps shows a whole PMD\n"
		"      of a region, not huge, in a private anonymous VMA (for kernels\n"
		"      without Async-fork)\n"
		"  -x  leave these operations out (to narrow a failure down):\n"
		"      ", prog);
	for (int i = 0; i < NR_OPS; i++)
		fprintf(stderr, "%s%s", op_name[i], i + 1 < NR_OPS ? "," : "\n");
	exit(KSFT_FAIL);
}

/* -x: a comma-separated list of operation names. */
static void leave_out(char *list, const char *prog)
{
	for (char *name = strtok(list, ","); name; name = strtok(NULL, ",")) {
		int i = 0;

		while (i < NR_OPS && strcmp(name, op_name[i]))
			i++;
		if (i == NR_OPS || i == OP_WRITE) {
			fprintf(stderr, "%s: -x %s: not an operation that can be left out\n",
				prog, name);
			usage(prog);
		}
		opt.op_off[i] = true;
	}
}

static int parse_int(const char *s, int min, int max, const char *prog)
{
	char *end;
	long v = strtol(s, &end, 10);

	if (!*s || *end || v < min || v > max)
		usage(prog);
	return v;
}

int main(int argc, char **argv)
{
	long af0[NR_AF], af1[NR_AF], d[NR_AF], mig0, pt0, pt1, ksm_sharing = 0;
	pthread_t migrator;
	uint64_t rng;
	double end, next_check;
	size_t per_region, maxpages[NR_REGIONS], all_pages = 0;
	int c;

	top_pid = getpid();
	opt.seed = time(NULL) ^ getpid();
	while ((c = getopt(argc, argv, "s:t:j:c:m:g:F:D:kdnaPx:")) != -1) {
		switch (c) {
		case 's':
			opt.seed = strtoull(optarg, NULL, 0); break;
		case 't':
			opt.seconds = parse_int(optarg, 1, 86400, argv[0]); break;
		case 'j':
			opt.workers = parse_int(optarg, 1, MAX_WORKERS, argv[0]); break;
		case 'c':
			opt.children = parse_int(optarg, 1, 64, argv[0]); break;
		case 'm':
			opt.mib = parse_int(optarg, 24, 4096, argv[0]); break;
		case 'g':
			opt.memcg_mib = parse_int(optarg, 8, 1 << 20, argv[0]); break;
		case 'F':
			opt.fail_pct = parse_int(optarg, 1, 100, argv[0]); break;
		case 'D':
			opt.defer_pct = parse_int(optarg, 0, 100, argv[0]); break;
		case 'P':
			opt.maps_debug = true; break;
		case 'k':
			opt.ksm = true; break;
		case 'n':
			opt.numa = true; break;
		case 'd':
			opt.odirect = true; break;
		case 'a':
			opt.expect_async = true; break;
		case 'x':
			leave_out(optarg, argv[0]); break;
		default:
			usage(argv[0]);
		}
	}
	if (optind != argc)
		usage(argv[0]);
	setvbuf(stdout, NULL, _IONBF, 0);
	ksft_print_header();
	ksft_set_plan(4);
	ksft_print_msg("seed %#llx: %d s, %d workers, %d children at once, %d MiB%s%s%s\n",
		       (unsigned long long)opt.seed, opt.seconds, opt.workers,
		       opt.children, opt.mib, opt.ksm ? ", KSM" : "",
		       opt.numa ? ", NUMA migration" : "",
		       opt.odirect ? ", O_DIRECT" : "");
	for (int i = 0; i < NR_OPS; i++)
		if (opt.op_off[i])
			ksft_print_msg("left out: %s\n", op_name[i]);
	rng = opt.seed ? opt.seed : 1;

	if (opt.memcg_mib)
		enter_memcg();
	if (opt.ksm)
		set_knobs();
	if (opt.odirect)
		loop_setup();
	if (opt.fail_pct)
		find_fault_sites();
	forks_fd = memfd_create("fork_stress_forks", 0);
	if (forks_fd < 0)
		ksft_exit_fail_perror("memfd_create");
	pt0 = meminfo_kb("PageTables");
	read_af(af0);
	mig0 = read_vmstat("pgmigrate_success");

	pthread_rwlockattr_t attr;

	pthread_rwlockattr_init(&attr);
	pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&fork_lock, &attr);
	pthread_barrier_init(&start_barrier, NULL, opt.workers + opt.numa + 1);
	/* Threads first: glibc may malloc() for them, and malloc() may move the break. */
	for (int i = 0; i < opt.workers; i++) {
		struct worker *w = &workers[i];

		w->rng = rnd(&rng) | 1;
		if (pipe2(w->pipe, O_NONBLOCK))
			ksft_exit_fail_perror("pipe2");
		if (pthread_create(&w->th, NULL, worker_main, w))
			ksft_exit_fail_msg("pthread_create\n");
	}
	if (opt.numa && pthread_create(&migrator, NULL, migrator_main, NULL))
		ksft_exit_fail_msg("pthread_create\n");

	/* From here until the regions are gone: no malloc(), no stdio files. */
	brk_base = (char *)PMD_UP((uintptr_t)sbrk(0));
	/*
	 * A sixth of -m each, in whole PMDs; half as much again for the
	 * regions of 4 KiB pages, which keep most of the PMDs Async-fork
	 * defers (the others' are often huge, file-backed or in pieces).
	 */
	per_region = (size_t)opt.mib * 256 / NR_REGIONS / PAGES_2M * PAGES_2M;
	for (int i = 0; i < NR_REGIONS; i++) {
		maxpages[i] = kinds[i] == ANON ?
			per_region * 3 / 2 / PAGES_2M * PAGES_2M : per_region;
		setup_region(&regions[i], kinds[i], thp_advice[i], maxpages[i], &rng);
		all_pages += maxpages[i];
	}
	snap_size = NR_REGIONS * sizeof(struct view) + all_pages * sizeof(uint64_t);
	snapbuf = mmap(NULL, snap_size, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (snapbuf == MAP_FAILED)
		ksft_exit_fail_perror("mmap");
	if (opt.fail_pct)
		next_fault_site();

	pthread_barrier_wait(&start_barrier);
	end = now() + opt.seconds;
	next_check = now() + 5;
	/*
	 * A run that checked no child tested nothing: on a slow emulated
	 * machine, with KSM, khugepaged and the migrator all busy, the first
	 * fork can take most of a short run (0 forks in 15 s, make test of
	 * 2026-11-28).  Go on until two children were checked, for at most
	 * twice the time again; a fork that never ends still fails the run.
	 */
	while (!children_bad && !atomic_load(&parent_bad) &&
	       (now() < end || (forks < 2 && now() < end + 2 * opt.seconds))) {
		usleep(20000);
		reap(false);
		if (opt.ksm)
			ksm_sharing += read_long("/sys/kernel/mm/ksm/pages_sharing") > 0;
		if (now() > next_check) {
			if (opt.fail_pct)
				next_fault_site();
			pthread_rwlock_wrlock(&fork_lock);
			atomic_fetch_add(&parent_bad, check_all("parent"));
			pthread_rwlock_unlock(&fork_lock);
			next_check = now() + 5;
		}
	}
	if (now() >= end + 1)
		ksft_print_msg("ran %.0f s beyond -t for its first children\n", now() - end);
	atomic_store(&stop, true);
	for (int i = 0; i < opt.workers; i++)
		pthread_join(workers[i].th, NULL);
	if (opt.numa)
		pthread_join(migrator, NULL);
	reap(true);
	/* Every child has copied its tables and left. */
	read_af(af1);
	for (int i = 0; i < NR_AF; i++)
		d[i] = af0[i] < 0 || af1[i] < 0 ? -1 : af1[i] - af0[i];
	if (opt.fail_pct) {
		stop_failures(FAIL_ALLOC);
		stop_failures(FAIL_SLAB);
	}
	atomic_fetch_add(&parent_bad, check_all("parent"));

	for (int i = 0; i < NR_REGIONS; i++) {
		struct region *r = &regions[i];

		if (r->kind == BRK)
			brk(brk_base);
		else
			munmap(r->slot[0], 2 * r->slot_size);
	}
	for (int i = 0; i < NR_OPS; i++)
		ksft_print_msg("%-9s %ld\n", op_name[i], atomic_load(&op_count[i]));
	if (opt.maps_debug)
		ksft_print_msg("smaps: a whole PMD, not huge, at %ld of %ld forks (%ld%%), outside THP regions at %ld (%ld%%)\n",
			       maps_any, forks_made, forks_made ? 100 * maps_any / forks_made : 0,
			       maps_small, forks_made ? 100 * maps_small / forks_made : 0);
	/* For harnesses: keep the form. */
	printf("fork_stress: forks %ld, deferred %ld (%ld%%), syncs %ld, child copies %ld, errors %ld\n",
	       forks_made, forks_deferred, forks_made ? 100 * forks_deferred / forks_made : 0,
	       d[AF_SYNCS], d[AF_CHILD], d[AF_ERRORS]);
	if (forks_made > forks_deferred)
		ksft_print_msg("not deferred: %ld found nothing to defer, %ld fell back (pin, no memory), %ld neither\n",
			       forks_empty, forks_fell_back,
			       forks_made - forks_deferred - forks_empty - forks_fell_back);

	if (children_bad || !forks)
		ksft_test_result_fail("snapshots exact: %ld of %ld children found a difference\n",
				      children_bad, forks);
	else
		ksft_test_result_pass("snapshots exact: %ld children (%ld killed by a failed copy, %ld forks failed)\n",
				      forks, children_killed, atomic_load(&fork_failed));
	ksft_test_result(!atomic_load(&parent_bad) && (opt.fail_pct || !fork_failed),
			 "parent memory exact (%ld pages differ, %ld forks failed)\n",
			 atomic_load(&parent_bad), atomic_load(&fork_failed));

	if (opt.expect_async || opt.fail_pct || opt.ksm || opt.numa) {
		bool ok = true;

		/* Children's forks of grandchildren included. */
		ksft_print_msg("async forks %ld, page tables copied by children %ld, by the parent %ld\n",
			       d[AF_FORKS], d[AF_CHILD], d[AF_SYNCS]);
		if (opt.expect_async && (forks_deferred <= 0 || d[AF_CHILD] <= 0)) {
			ksft_print_msg("no fork deferred a page table, or no child copied one\n");
			ok = false;
		}
		/*
		 * A fork falls back (kernel's own counter) when it cannot
		 * allocate its context, which a memory cgroup at its limit may
		 * refuse: that is correct, not a gap in coverage.  Of the other
		 * forks, all but one must defer at the rate asked for: a short
		 * run on a slow machine makes few forks, and one whose regions
		 * were all being remapped at that moment is chance, not the
		 * layout that once left nine forks in ten with nothing to defer.
		 */
		long judged = forks_made - forks_fell_back;

		if (opt.expect_async && (forks_deferred + 1) * 100 < (long)opt.defer_pct * judged) {
			ksft_print_msg("%ld of %ld forks deferred page tables, fewer than %d%% beyond one\n",
				       forks_deferred, judged, opt.defer_pct);
			ok = false;
		}
		/* Every failure kills a child or fails a fork, and is counted. */
		if (opt.fail_pct && (!(children_killed + fork_failed) ||
				     d[AF_ERRORS] < children_killed)) {
			ksft_print_msg("children killed %ld, forks failed %ld, async_fork_error moved %ld\n",
				       children_killed, atomic_load(&fork_failed), d[AF_ERRORS]);
			ok = false;
		}
		if (opt.ksm && !ksm_sharing) {
			ksft_print_msg("KSM merged nothing\n");
			ok = false;
		}
		if (opt.numa && read_vmstat("pgmigrate_success") == mig0) {
			ksft_print_msg("no page migrated\n");
			ok = false;
		}
		ksft_test_result(ok, "counters moved\n");
	} else {
		ksft_test_result_skip("counters moved (no -a, -F, -k or -n)\n");
	}

	pt1 = meminfo_kb("PageTables");
	for (int i = 0; i < 50 && pt1 - pt0 > 256; i++) {
		usleep(100000);
		pt1 = meminfo_kb("PageTables");
	}
	ksft_test_result(pt1 - pt0 <= 256, "page tables freed (%+ld KiB)\n", pt1 - pt0);

	if (opt.odirect)
		loop_teardown();
	if (opt.ksm)
		restore_knobs();
	if (opt.memcg_mib)
		leave_memcg();
	ksft_finished();
}
