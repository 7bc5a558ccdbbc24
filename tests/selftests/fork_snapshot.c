// SPDX-License-Identifier: GPL-2.0
/*
 * fork_snapshot: the child of fork() holds an exact point-in-time copy of
 * its parent's memory.  After fork, each side overwrites the whole region;
 * the other side must still see, byte for byte, what was there at fork.
 *
 * One fixture, one variant per kind of memory: 4 KiB anonymous pages,
 * PMD-mapped THP, PTE-mapped THP, a private file mapping partly COWed.
 * The same tests guard Async-fork, where the child copies the page tables
 * after fork() has returned in the parent.  FORK_SNAPSHOT_EXPECT_ASYNC=1
 * (run with vm.async_fork=2) makes every fork of a 4 KiB or PTE-mapped
 * region prove, by /proc/vmstat, that it went the asynchronous way;
 * FORK_SNAPSHOT_EXPECT_ASYNC=0 (vm.async_fork=0) that none did.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/swap.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "snapshot.h"
#include "knobs.h"

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE	25	/* glibc 2.36 headers predate it */
#endif

#define SZ_2M		(2UL << 20)
/*
 * Eight PMDs: enough PTE tables for four copy workers to share and for the
 * parent to meet tables copied and tables not yet copied; small enough that
 * the 84 cases take about four minutes on the debug kernel under TCG (238 s
 * with four copy threads on an idle 2-core host).
 */
#define REGION_SIZE	(16UL << 20)
/*
 * Seconds per case: the harness default (30) is too tight for a loaded
 * host emulating the guest (TCG), where one pass over the region takes
 * seconds; the suite bounds the whole program separately.
 */
#define CASE_TIMEOUT	180

enum backing {
	ANON_4K,
	ANON_THP,
	ANON_THP_PTE_MAPPED,
	FILE_PRIVATE,
};

/* AnonHugePages of the mapping that starts at @addr, in KiB, or -1. */
static long anon_huge_kb(void *addr)
{
	char line[256];
	long kb = -1;
	int in = 0;
	FILE *f = fopen("/proc/self/smaps", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		unsigned long start, end;

		if (sscanf(line, "%lx-%lx ", &start, &end) == 2)
			in = start == (unsigned long)addr;
		else if (in && sscanf(line, "AnonHugePages: %ld kB", &kb) == 1)
			break;
	}
	fclose(f);
	return kb;
}

static char *map_aligned(size_t size, int prot, int flags, int fd)
{
	char *p = mmap(NULL, size + SZ_2M, PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *a;

	if (p == MAP_FAILED)
		return MAP_FAILED;
	a = (char *)(((uintptr_t)p + SZ_2M - 1) & ~(SZ_2M - 1));
	if (mmap(a, size, prot, flags | MAP_FIXED, fd, 0) == MAP_FAILED)
		return MAP_FAILED;
	/* Trim the alignment slack so that the region is a VMA of its own. */
	if (a > p)
		munmap(p, a - p);
	munmap(a + size, p + size + SZ_2M - (a + size));
	return a;
}

FIXTURE(snapshot) {
	char *mem;
	size_t size;
};

FIXTURE_VARIANT(snapshot) {
	enum backing backing;
};

FIXTURE_VARIANT_ADD(snapshot, anon_4k) {
	.backing = ANON_4K,
};

FIXTURE_VARIANT_ADD(snapshot, anon_thp) {
	.backing = ANON_THP,
};

FIXTURE_VARIANT_ADD(snapshot, anon_thp_pte_mapped) {
	.backing = ANON_THP_PTE_MAPPED,
};

FIXTURE_VARIANT_ADD(snapshot, file_private) {
	.backing = FILE_PRIVATE,
};

/*
 * Map the THPs of [mem, mem + size) by PTEs: changing the protection of one
 * page splits a PMD mapping.  khugepaged may collapse them back between
 * two forks of a test.
 */
static void split_pmd_mappings(struct __test_metadata *_metadata, char *mem,
			       size_t size)
{
	for (size_t off = 0; off < size; off += SZ_2M) {
		ASSERT_EQ(mprotect(mem + off, 4096, PROT_READ), 0);
		ASSERT_EQ(mprotect(mem + off, 4096, PROT_READ | PROT_WRITE), 0);
	}
	ASSERT_EQ(anon_huge_kb(mem), 0);
}

FIXTURE_SETUP(snapshot)
{
	int prot = PROT_READ | PROT_WRITE;
	size_t off;

	self->size = REGION_SIZE;
	switch (variant->backing) {
	case ANON_4K:
	case ANON_THP:
	case ANON_THP_PTE_MAPPED:
		self->mem = map_aligned(self->size, prot,
					MAP_PRIVATE | MAP_ANONYMOUS, -1);
		ASSERT_NE(self->mem, MAP_FAILED);
		ASSERT_EQ(madvise(self->mem, self->size,
				  variant->backing == ANON_4K ?
				  MADV_NOHUGEPAGE : MADV_HUGEPAGE), 0);
		fill(self->mem, self->size, 1);
		break;
	case FILE_PRIVATE: {
		char path[] = "/tmp/fork_snapshot.XXXXXX";
		int fd = mkstemp(path);
		char *w;

		ASSERT_GE(fd, 0);
		unlink(path);
		ASSERT_EQ(ftruncate(fd, self->size), 0);
		w = mmap(NULL, self->size, prot, MAP_SHARED, fd, 0);
		ASSERT_NE(w, MAP_FAILED);
		fill(w, self->size, 1);
		munmap(w, self->size);
		self->mem = map_aligned(self->size, prot, MAP_PRIVATE, fd);
		close(fd);
		ASSERT_NE(self->mem, MAP_FAILED);
		/* Read every page, COW every other one: both kinds of PTE. */
		for (off = 0; off < self->size; off += 4096) {
			volatile char *c = self->mem + off;

			if ((off / 4096) & 1)
				*c = *c;
			else
				(void)*c;
		}
		break;
	}
	}

	if (variant->backing == ANON_THP || variant->backing == ANON_THP_PTE_MAPPED) {
		if (anon_huge_kb(self->mem) <= 0)
			SKIP(return, "no THP: transparent hugepages unavailable");
	}
	if (variant->backing == ANON_THP_PTE_MAPPED)
		split_pmd_mappings(_metadata, self->mem, self->size);
	ASSERT_EQ(mismatch(self->mem, self->size, 1), -1);
}

FIXTURE_TEARDOWN(snapshot)
{
	if (self->mem && self->mem != MAP_FAILED)
		munmap(self->mem, self->size);
}

/* What FORK_SNAPSHOT_EXPECT_ASYNC asks of this variant: 1, 0, or -1 (nothing). */
static int expect_async(const FIXTURE_VARIANT(snapshot) *variant)
{
	const char *e = getenv("FORK_SNAPSHOT_EXPECT_ASYNC");

	if (!e || !*e)
		return -1;
	if (*e == '0')
		return 0;
	/* PMD-mapped THP and private files are copied at fork() as before. */
	return variant->backing == ANON_4K || variant->backing == ANON_THP_PTE_MAPPED ?
		1 : -1;
}

struct af_counts {
	long forks, tables;
};

static struct af_counts af_counts(void)
{
	return (struct af_counts){
		vmstat("async_fork"),
		vmstat("async_fork_pmd_child") + vmstat("async_fork_pmd_sync"),
	};
}

/*
 * Check that the fork(s) since @before went the way the run expects: an
 * async fork of the region leaves each of its PMDs to the child (or to the
 * parent's synchronization), so at least that many tables were copied.
 */
static void check_async(struct __test_metadata *_metadata,
			const FIXTURE_VARIANT(snapshot) *variant,
			struct af_counts before)
{
	struct af_counts now = af_counts();
	int want = expect_async(variant);

	if (want < 0)
		return;
	ASSERT_GE(before.forks, 0) {
		TH_LOG("no async_fork counters in /proc/vmstat");
	}
	if (want) {
		ASSERT_GE(now.forks - before.forks, 1);
		/*
		 * khugepaged may have collapsed some of a MADV_HUGEPAGE region
		 * back into PMD-mapped THP (copied at fork) since the last fork.
		 */
		ASSERT_GE(now.tables - before.tables,
			  variant->backing == ANON_4K ? (long)(REGION_SIZE / SZ_2M) : 1L);
	} else {
		ASSERT_EQ(now.forks - before.forks, 0);
	}
}

/* Child: wait for the parent's go on @fd, then check the pre-fork contents. */
static void __attribute__((noreturn)) child_check(int fd, const char *mem, size_t size)
{
	char c;
	long bad;

	if (read(fd, &c, 1) != 1)
		_exit(2);
	bad = mismatch(mem, size, 1);
	if (bad >= 0)
		fprintf(stderr, "# child: byte %ld differs from the pre-fork contents\n", bad);
	_exit(bad >= 0);
}

/* Parent: let the child check, reap it, and require that it found no change. */
static void release_child(struct __test_metadata *_metadata, int go[2], pid_t pid)
{
	int status;

	ASSERT_EQ(write(go[1], "g", 1), 1);
	ASSERT_EQ(waitpid(pid, &status, 0), pid);
	ASSERT_TRUE(WIFEXITED(status));
	ASSERT_EQ(WEXITSTATUS(status), 0);
	close(go[0]);
	close(go[1]);
}

/*
 * One test per way the parent can change its page tables right after fork()
 * returns: the parent runs @op at once (while, with Async-fork, the child
 * may still be copying), then the child compares every byte of its copy
 * with the pre-fork contents.  @op checks what the parent must see itself.
 */
typedef void (*parent_op)(struct __test_metadata *_metadata,
			  FIXTURE_DATA(snapshot) *self,
			  const FIXTURE_VARIANT(snapshot) *variant);

static void run_op(struct __test_metadata *_metadata, FIXTURE_DATA(snapshot) *self,
		   const FIXTURE_VARIANT(snapshot) *variant, parent_op op)
{
	struct af_counts before = af_counts();
	int go[2];
	pid_t pid;

	ASSERT_EQ(pipe(go), 0);
	pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0)
		child_check(go[0], self->mem, self->size);
	op(_metadata, self, variant);
	release_child(_metadata, go, pid);
	check_async(_metadata, variant, before);
}

#define PARENT_OP_TEST(name)						\
	static void op_##name(struct __test_metadata *_metadata,	\
			      FIXTURE_DATA(snapshot) *self,		\
			      const FIXTURE_VARIANT(snapshot) *variant); \
	TEST_F_TIMEOUT(snapshot, parent_##name, CASE_TIMEOUT)		\
	{								\
		run_op(_metadata, self, variant, op_##name);		\
	}								\
	static void op_##name(struct __test_metadata *_metadata,	\
			      FIXTURE_DATA(snapshot) *self,		\
			      const FIXTURE_VARIANT(snapshot) *variant)

static bool is_anon(const FIXTURE_VARIANT(snapshot) *variant)
{
	return variant->backing != FILE_PRIVATE;
}

static long nonzero(const char *mem, size_t size)
{
	for (size_t i = 0; i < size; i++)
		if (mem[i])
			return i;
	return -1;
}

/* After zapping, anonymous memory reads zero and a private file its file. */
static void assert_discarded(struct __test_metadata *_metadata,
			     FIXTURE_DATA(snapshot) *self,
			     const FIXTURE_VARIANT(snapshot) *variant)
{
	if (is_anon(variant)) {
		ASSERT_EQ(nonzero(self->mem, self->size), -1);
	} else {
		ASSERT_EQ(mismatch(self->mem, self->size, 1), -1);
	}
}

PARENT_OP_TEST(write)
{
	fill(self->mem, self->size, 2);
	ASSERT_EQ(mismatch(self->mem, self->size, 2), -1);
}

TEST_F_TIMEOUT(snapshot, repeated_forks, CASE_TIMEOUT)
{
	/* Several snapshots in a row, each after the parent changed memory. */
	for (int i = 0; i < 3; i++) {
		run_op(_metadata, self, variant, op_write);
		fill(self->mem, self->size, 1);
	}
}

TEST_F_TIMEOUT(snapshot, parent_keeps_its_contents, CASE_TIMEOUT)
{
	/* The other direction: the child's writes never reach the parent. */
	int go[2], status;
	char c;
	pid_t pid;

	ASSERT_EQ(pipe(go), 0);
	pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		fill(self->mem, self->size, 3);
		if (write(go[1], "g", 1) != 1)
			_exit(2);
		_exit(mismatch(self->mem, self->size, 3) >= 0);
	}
	ASSERT_EQ(read(go[0], &c, 1), 1);
	ASSERT_EQ(waitpid(pid, &status, 0), pid);
	ASSERT_TRUE(WIFEXITED(status));
	ASSERT_EQ(WEXITSTATUS(status), 0);
	ASSERT_EQ(mismatch(self->mem, self->size, 1), -1);
	close(go[0]);
	close(go[1]);
}

PARENT_OP_TEST(read)
{
	ASSERT_EQ(mismatch(self->mem, self->size, 1), -1);
}

PARENT_OP_TEST(munmap)
{
	self->size /= 2;
	ASSERT_EQ(munmap(self->mem + self->size, self->size), 0);
	ASSERT_EQ(mismatch(self->mem, self->size, 1), -1);
}

PARENT_OP_TEST(madv_dontneed)
{
	ASSERT_EQ(madvise(self->mem, self->size, MADV_DONTNEED), 0);
	assert_discarded(_metadata, self, variant);
}

PARENT_OP_TEST(madv_free)
{
	if (!is_anon(variant)) {
		ASSERT_EQ(madvise(self->mem, self->size, MADV_FREE), -1);
		ASSERT_EQ(errno, EINVAL);
		return;
	}
	ASSERT_EQ(madvise(self->mem, self->size, MADV_FREE), 0);
	/* Lazily freed: each word is either still there or zero. */
	for (size_t i = 0; i < self->size / 8; i++) {
		uint64_t w = ((uint64_t *)self->mem)[i];

		ASSERT_TRUE(w == 0 || w == pattern(1, i));
	}
	fill(self->mem, self->size, 2);
	ASSERT_EQ(mismatch(self->mem, self->size, 2), -1);
}

PARENT_OP_TEST(madv_cold)
{
	ASSERT_EQ(madvise(self->mem, self->size, MADV_COLD), 0);
	ASSERT_EQ(mismatch(self->mem, self->size, 1), -1);
}

PARENT_OP_TEST(madv_pageout)
{
	/* Swaps anonymous pages out (the test guest has zram swap). */
	ASSERT_EQ(madvise(self->mem, self->size, MADV_PAGEOUT), 0);
	ASSERT_EQ(mismatch(self->mem, self->size, 1), -1);
	fill(self->mem, self->size, 2);
	ASSERT_EQ(mismatch(self->mem, self->size, 2), -1);
}

/* The first swap area of /proc/swaps and its priority; false if none. */
static bool first_swap(char *path, size_t len, int *prio)
{
	char line[256], fmt[32];
	bool found = false;
	FILE *f = fopen("/proc/swaps", "r");

	if (!f)
		return false;
	snprintf(fmt, sizeof(fmt), "%%%zus %%*s %%*s %%*s %%d", len - 1);
	if (fgets(line, sizeof(line), f) && fgets(line, sizeof(line), f))
		found = sscanf(line, fmt, path, prio) == 2;
	fclose(f);
	return found;
}

/*
 * swapoff while the child may still be copying.  The region is swapped out
 * before fork(), so the parent's tables hold swap entries; swapoff's
 * try_to_unuse() then replaces them with present pages (unuse_pte()) in
 * the parent, under PMDs the child may not have copied yet, and must also
 * find the entries the child copies meanwhile.  Swap is on again before
 * anything is checked.  Returns whether the child's copy was still under
 * way when swapoff started.
 */
static bool swapoff_once(struct __test_metadata *_metadata,
			 FIXTURE_DATA(snapshot) *self,
			 const FIXTURE_VARIANT(snapshot) *variant,
			 const char *path, int prio)
{
	struct af_counts before;
	int go[2], off, on = -1, err = 0;
	long copied;
	pid_t pid;

	fill(self->mem, self->size, 1);
	ASSERT_EQ(madvise(self->mem, self->size, MADV_PAGEOUT), 0);
	ASSERT_GT(proc_kb("/proc/self/status", "VmSwap"), 0);

	before = af_counts();
	copied = vmstat("async_fork_pmd_child");
	ASSERT_EQ(pipe(go), 0);
	pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0)
		child_check(go[0], self->mem, self->size);
	/* The child counts its tables once it has copied them all. */
	copied = vmstat("async_fork_pmd_child") - copied;
	off = swapoff(path);
	if (off)
		err = errno;
	else
		on = swapon(path, prio >= 0 ? SWAP_FLAG_PREFER | prio : 0);
	ASSERT_EQ(off, 0) {
		TH_LOG("swapoff %s: %s", path, strerror(err));
	}
	ASSERT_EQ(on, 0) {
		TH_LOG("swapon %s again: %s", path, strerror(errno));
	}
	/* swapoff brought every page of every process back in. */
	ASSERT_EQ(proc_kb("/proc/self/status", "VmSwap"), 0);
	ASSERT_EQ(mismatch(self->mem, self->size, 1), -1);
	fill(self->mem, self->size, 2);
	release_child(_metadata, go, pid);
	ASSERT_EQ(mismatch(self->mem, self->size, 2), -1);
	check_async(_metadata, variant, before);
	return copied == 0;
}

TEST_F_TIMEOUT(snapshot, parent_swapoff, CASE_TIMEOUT)
{
	char path[128];
	int prio, tries = 0;
	bool pending;

	if (!first_swap(path, sizeof(path), &prio))
		SKIP(return, "no swap area in /proc/swaps");
	do {
		pending = swapoff_once(_metadata, self, variant, path, prio);
	} while (expect_async(variant) == 1 && !pending && ++tries < 5);
	EXPECT_TRUE(expect_async(variant) != 1 || pending) {
		TH_LOG("the child always finished its copy before swapoff started");
	}
}

PARENT_OP_TEST(madv_collapse)
{
	/* Collapse into THPs where possible; the contents must not change. */
	madvise(self->mem, self->size, MADV_COLLAPSE);
	ASSERT_EQ(mismatch(self->mem, self->size, 1), -1);
	fill(self->mem, self->size, 2);
	ASSERT_EQ(mismatch(self->mem, self->size, 2), -1);
}

PARENT_OP_TEST(mprotect)
{
	size_t third = self->size / 3 & ~4095UL;

	ASSERT_EQ(mprotect(self->mem, self->size, PROT_READ), 0);
	ASSERT_EQ(mismatch(self->mem, self->size, 1), -1);
	/* Split the VMA in three, then merge it back. */
	ASSERT_EQ(mprotect(self->mem + third, third, PROT_READ | PROT_WRITE), 0);
	fill(self->mem + third, third, 2);
	ASSERT_EQ(mprotect(self->mem, self->size, PROT_READ | PROT_WRITE), 0);
	fill(self->mem, self->size, 2);
	ASSERT_EQ(mismatch(self->mem, self->size, 2), -1);
}

PARENT_OP_TEST(mremap_move)
{
	char *to = map_aligned(self->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1);

	ASSERT_NE(to, MAP_FAILED);
	ASSERT_EQ(mremap(self->mem, self->size, self->size,
			 MREMAP_MAYMOVE | MREMAP_FIXED, to), to);
	self->mem = to;
	ASSERT_EQ(mismatch(self->mem, self->size, 1), -1);
	fill(self->mem, self->size, 2);
	ASSERT_EQ(mismatch(self->mem, self->size, 2), -1);
}

PARENT_OP_TEST(mremap_shrink)
{
	ASSERT_EQ(mremap(self->mem, self->size, self->size / 2, 0), self->mem);
	self->size /= 2;
	ASSERT_EQ(mismatch(self->mem, self->size, 1), -1);
	fill(self->mem, self->size, 2);
}

PARENT_OP_TEST(mremap_grow)
{
	size_t old = self->size;
	char *p = mremap(self->mem, old, 2 * old, MREMAP_MAYMOVE);

	ASSERT_NE(p, MAP_FAILED);
	self->mem = p;
	self->size = 2 * old;
	ASSERT_EQ(mismatch(self->mem, old, 1), -1);
	fill(self->mem, old, 2);
	if (is_anon(variant)) {
		ASSERT_EQ(nonzero(self->mem + old, old), -1);
		fill(self->mem + old, old, 2);
	}
}

PARENT_OP_TEST(mlock)
{
	ASSERT_EQ(mlock(self->mem, self->size), 0);
	fill(self->mem, self->size, 2);
	ASSERT_EQ(munlock(self->mem, self->size), 0);
	ASSERT_EQ(mismatch(self->mem, self->size, 2), -1);
}

PARENT_OP_TEST(nested_fork)
{
	int status;
	pid_t pid = fork();

	ASSERT_GE(pid, 0);
	if (pid == 0)
		_exit(mismatch(self->mem, self->size, 1) >= 0);
	fill(self->mem, self->size, 2);
	ASSERT_EQ(waitpid(pid, &status, 0), pid);
	ASSERT_TRUE(WIFEXITED(status));
	ASSERT_EQ(WEXITSTATUS(status), 0);
	ASSERT_EQ(mismatch(self->mem, self->size, 2), -1);
}

PARENT_OP_TEST(proc_self_mem_write)
{
	/* Writes through GUP (FOLL_FORCE | FOLL_WRITE), not the parent's PTEs. */
	size_t chunk = 1UL << 20;
	char *buf = malloc(chunk);
	int fd = open("/proc/self/mem", O_RDWR);

	ASSERT_NE(buf, NULL);
	ASSERT_GE(fd, 0);
	for (size_t off = 0; off < self->size; off += chunk) {
		for (size_t i = 0; i < chunk / 8; i++)
			((uint64_t *)buf)[i] = pattern(2, (off / 8) + i);
		ASSERT_EQ(pwrite(fd, buf, chunk, (off_t)(uintptr_t)(self->mem + off)),
			  (ssize_t)chunk);
	}
	close(fd);
	free(buf);
	ASSERT_EQ(mismatch(self->mem, self->size, 2), -1);
}

/*
 * Soft-dirty bits (pagemap bit 55) of the pages of @mem: 1 if all are set,
 * 0 if none is, -1 if some are, -2 on error.
 */
static int soft_dirty(const char *mem, size_t size)
{
	size_t pages = size / 4096, set = 0;
	uint64_t *ent = malloc(pages * sizeof(*ent));
	int fd = open("/proc/self/pagemap", O_RDONLY);
	ssize_t len = pages * sizeof(*ent);
	int ret = -2;

	if (ent && fd >= 0 &&
	    pread(fd, ent, len, (uintptr_t)mem / 4096 * sizeof(*ent)) == len) {
		for (size_t i = 0; i < pages; i++)
			set += (ent[i] >> 55) & 1;
		ret = set == pages ? 1 : set == 0 ? 0 : -1;
	}
	if (fd >= 0)
		close(fd);
	free(ent);
	return ret;
}

static void clear_soft_dirty(struct __test_metadata *_metadata)
{
	int fd = open("/proc/self/clear_refs", O_WRONLY);

	ASSERT_GE(fd, 0);
	ASSERT_EQ(write(fd, "4", 1), 1);
	close(fd);
}

static void op_clear_refs(struct __test_metadata *_metadata,
			  FIXTURE_DATA(snapshot) *self,
			  const FIXTURE_VARIANT(snapshot) *variant)
{
	clear_soft_dirty(_metadata);
	ASSERT_EQ(soft_dirty(self->mem, self->size), 0);
	ASSERT_EQ(mismatch(self->mem, self->size, 1), -1);
	fill(self->mem, self->size, 2);
	ASSERT_EQ(soft_dirty(self->mem, self->size), 1);
	ASSERT_EQ(mismatch(self->mem, self->size, 2), -1);
}

TEST_F_TIMEOUT(snapshot, parent_clear_refs_soft_dirty, CASE_TIMEOUT)
{
	/*
	 * The first clear also clears VM_SOFTDIRTY, which changes the VMA;
	 * after it, a clear is only the page-table walk that write-protects
	 * PTEs (clear_refs_pte_range()), which is what runs after fork().
	 */
	clear_soft_dirty(_metadata);
	fill(self->mem, self->size, 1);
	ASSERT_EQ(soft_dirty(self->mem, self->size), 1);
	run_op(_metadata, self, variant, op_clear_refs);
}

struct writer {
	pthread_t thread;
	char *mem;
	size_t size, first;
	volatile int *start;
};

static void *writer_fn(void *arg)
{
	struct writer *w = arg;

	while (!*w->start)
		;
	for (size_t i = w->first / 8; i < (w->first + w->size) / 8; i++)
		((uint64_t *)w->mem)[i] = pattern(2, i);
	return NULL;
}

TEST_F_TIMEOUT(snapshot, parent_threads_write, CASE_TIMEOUT)
{
	/*
	 * The parent is multi-threaded when it forks; its threads start
	 * writing the moment fork() returns, each to its own part.
	 */
	static volatile int start;
	struct writer w[4];
	int go[2], i;
	pid_t pid;

	start = 0;
	for (i = 0; i < 4; i++) {
		w[i] = (struct writer){ .mem = self->mem, .size = self->size / 4,
					.first = i * (self->size / 4), .start = &start };
		ASSERT_EQ(pthread_create(&w[i].thread, NULL, writer_fn, &w[i]), 0);
	}
	ASSERT_EQ(pipe(go), 0);
	pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0)
		child_check(go[0], self->mem, self->size);
	start = 1;
	for (i = 0; i < 4; i++)
		ASSERT_EQ(pthread_join(w[i].thread, NULL), 0);
	release_child(_metadata, go, pid);
	ASSERT_EQ(mismatch(self->mem, self->size, 2), -1);
}

/* The page remote_write_once() writes in PMD @i: a different one in each. */
static size_t written_off(size_t i)
{
	return i * SZ_2M + i * 4096;
}

/*
 * GUP into the child's memory while it copies: right after fork() the
 * parent writes one page of every PMD of the child through
 * /proc/PID/mem, whose GUP on the child's mm faults on tables the child
 * has not copied yet and must copy them first.  The written pages
 * must be the child's own (COW), never the pages it shares with the
 * parent.  Returns whether the child's copy was still under way when
 * fork() returned: async_fork_pmd_child moves when the child has copied
 * everything (or when a remote access made it copy a table early).  Under
 * TCG the child has finished first in up to 6 tries in a row, hence the
 * 20 tries of the test.
 */
static bool remote_write_once(struct __test_metadata *_metadata,
			      FIXTURE_DATA(snapshot) *self,
			      const FIXTURE_VARIANT(snapshot) *variant)
{
	static char buf[4096];
	size_t nr = REGION_SIZE / SZ_2M, i;
	struct af_counts before = af_counts();
	long copied = vmstat("async_fork_pmd_child");
	char path[32];
	int go[2], fd;
	ssize_t done;
	pid_t pid;

	if (variant->backing == ANON_THP_PTE_MAPPED)
		split_pmd_mappings(_metadata, self->mem, self->size);
	memset(buf, 0xa5, sizeof(buf));
	ASSERT_EQ(pipe(go), 0);
	pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		char c;
		long bad = -1;

		if (read(go[0], &c, 1) != 1)
			_exit(2);
		for (i = 0; i < nr && bad < 0; i++) {
			char *page = self->mem + written_off(i);

			for (size_t b = 0; b < 4096 && bad < 0; b++)
				if (page[b] != (char)0xa5)
					bad = page - self->mem + b;
		}
		if (bad >= 0) {
			fprintf(stderr, "# child: byte %ld lacks the parent's remote write\n", bad);
			_exit(1);
		}
		/* Put the pre-fork pages back, then check everything. */
		for (i = 0; i < nr; i++) {
			size_t off = written_off(i);

			for (size_t w = off / 8; w < (off + 4096) / 8; w++)
				((uint64_t *)self->mem)[w] = pattern(1, w);
		}
		bad = mismatch(self->mem, self->size, 1);
		if (bad >= 0)
			fprintf(stderr, "# child: byte %ld differs from the pre-fork contents\n", bad);
		_exit(bad >= 0);
	}
	copied = vmstat("async_fork_pmd_child") - copied;
	snprintf(path, sizeof(path), "/proc/%d/mem", pid);
	fd = open(path, O_RDWR);
	ASSERT_GE(fd, 0);
	/* Last PMD first: the child copies in address order. */
	for (i = nr; i-- > 0;) {
		done = pwrite(fd, buf, sizeof(buf), (uintptr_t)self->mem + written_off(i));
		ASSERT_EQ(done, 4096) {
			TH_LOG("write to %s: %s", path, strerror(errno));
		}
	}
	close(fd);
	/* Nothing of it reached the parent. */
	ASSERT_EQ(mismatch(self->mem, self->size, 1), -1);
	release_child(_metadata, go, pid);
	ASSERT_EQ(mismatch(self->mem, self->size, 1), -1);
	check_async(_metadata, variant, before);
	return copied == 0;
}

TEST_F_TIMEOUT(snapshot, remote_write_into_copying_child, CASE_TIMEOUT)
{
	int tries = 0;
	bool pending;

	do {
		pending = remote_write_once(_metadata, self, variant);
	} while (expect_async(variant) == 1 && !pending && ++tries < 20);
	EXPECT_TRUE(expect_async(variant) != 1 || pending) {
		TH_LOG("the child always finished its copy before the first write");
	}
	if (expect_async(variant) == 1 && pending)
		TH_LOG("the child's copy was under way at try %d", tries + 1);
}

TEST_HARNESS_MAIN
