// SPDX-License-Identifier: GPL-2.0
/*
 * ksm_lazyfree: can MADV_FREE on one mapping of a KSM page make reclaim
 * drop the page from a mapping that never asked for it?  No fork needed.
 *
 *   1. Pages A and B hold the same data X; ksmd merges them into KSM page K.
 *   2. MADV_DONTNEED on B: K is mapped by A alone.
 *   3. MADV_FREE on A: K (mapped once) is made lazyfree and clean.
 *   4. Page C is written with X; ksmd merges C into K (found in the stable
 *      tree).  MADV_DONTNEED on A: K is mapped by C alone.
 *   5. MADV_PAGEOUT on C: reclaim finds a clean lazyfree folio and discards
 *      it.  C then reads zeros, though nothing was done to C but a write.
 *
 * Exit 0: C kept its data; 1: C reads zeros (the bug); 2: could not set
 * the case up (no KSM, no merge within the time limit).  Root, with
 * /sys/kernel/mm/ksm; it sets ksmd fast and restores nothing but "run".
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT	21
#endif

#define PAGE	4096UL
#define KPF_KSM	21

static int pagemap_fd, kpageflags_fd;

static int write_str(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY);
	int ok = fd >= 0 && write(fd, val, strlen(val)) == (ssize_t)strlen(val);

	if (fd >= 0)
		close(fd);
	return ok ? 0 : -1;
}

/* The PFN mapping @p (0 if none), and whether it is a KSM page. */
static uint64_t pfn_of(const void *p, int *ksm)
{
	uint64_t e = 0, flags = 0;

	if (pread(pagemap_fd, &e, 8, ((uintptr_t)p / PAGE) * 8) != 8 || !(e >> 63))
		return 0;
	e &= (1ULL << 55) - 1;
	if (ksm) {
		*ksm = pread(kpageflags_fd, &flags, 8, e * 8) == 8 &&
		       ((flags >> KPF_KSM) & 1);
	}
	return e;
}

/* Wait up to 60 s until @a and @b map the same KSM page. */
static int wait_merged(const char *a, const char *b)
{
	for (int i = 0; i < 600; i++) {
		int ka = 0, kb = 0;
		uint64_t pa = pfn_of(a, &ka), pb = pfn_of(b, &kb);

		if (pa && pa == pb && ka && kb)
			return 0;
		usleep(100000);
	}
	return -1;
}

int main(void)
{
	char *m, *a, *b, *c, *x;
	long bad = 0;

	pagemap_fd = open("/proc/self/pagemap", O_RDONLY);
	kpageflags_fd = open("/proc/kpageflags", O_RDONLY);
	if (pagemap_fd < 0 || kpageflags_fd < 0 ||
	    write_str("/sys/kernel/mm/ksm/sleep_millisecs", "10") ||
	    write_str("/sys/kernel/mm/ksm/pages_to_scan", "1000") ||
	    write_str("/sys/kernel/mm/ksm/run", "1")) {
		printf("# SKIP: needs root, /proc/kpageflags and KSM\n");
		return 2;
	}
	m = mmap(NULL, 4 * PAGE, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	x = malloc(PAGE);
	if (m == MAP_FAILED || !x)
		return 2;
	madvise(m, 4 * PAGE, MADV_NOHUGEPAGE);
	a = m;
	b = m + PAGE;
	c = m + 2 * PAGE;
	for (size_t i = 0; i < PAGE; i++)
		x[i] = (char)(i * 7 + 13);
	memcpy(a, x, PAGE);
	memcpy(b, x, PAGE);
	memset(c, 0x5a, PAGE);
	memset(m + 3 * PAGE, 0xa5, PAGE);
	if (madvise(m, 4 * PAGE, MADV_MERGEABLE) || wait_merged(a, b)) {
		printf("# SKIP: A and B were not merged\n");
		return 2;
	}
	printf("# 1. A and B merged into KSM page %#llx\n",
	       (unsigned long long)pfn_of(a, NULL));
	madvise(b, PAGE, MADV_DONTNEED);
	madvise(a, PAGE, MADV_FREE);
	printf("# 2-3. B dropped, A freed lazily (A still maps %#llx)\n",
	       (unsigned long long)pfn_of(a, NULL));
	memcpy(c, x, PAGE);
	if (wait_merged(a, c)) {
		/* MADV_FREE took A's mapping away, or ksmd would not merge: no case. */
		printf("# SKIP: C was not merged into A's KSM page (A maps %#llx)\n",
		       (unsigned long long)pfn_of(a, NULL));
		return 2;
	}
	printf("# 4. C merged into the same KSM page %#llx\n",
	       (unsigned long long)pfn_of(c, NULL));
	madvise(a, PAGE, MADV_DONTNEED);
	madvise(c, PAGE, MADV_PAGEOUT);
	for (size_t i = 0; i < PAGE; i++)
		bad += c[i] != x[i];
	printf("# 5. after MADV_PAGEOUT C maps %#llx; %ld of %lu bytes of C differ\n",
	       (unsigned long long)pfn_of(c, NULL), bad, PAGE);
	printf("%s C kept its data\n", bad ? "not ok 1" : "ok 1");
	return bad ? 1 : 0;
}
