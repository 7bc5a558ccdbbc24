// SPDX-License-Identifier: GPL-2.0
/*
 * lazyfree_dirty_fork [ROUNDS]: is a page written after MADV_FREE still
 * dirty in a child of fork()?  (The property that Redis's arm64 start-up
 * check tests; this program is written for this project.)
 *
 * Each round maps 3 pages read-only, makes the middle one writable (its own
 * VMA, so nothing merges with it), writes it, MADV_FREEs it, writes it
 * again, forks, and lets the child read /proc/self/smaps for it:
 * Shared_Dirty, Shared_Clean, Rss, and /proc/self/pagemap + /proc/kpageflags
 * (KSM, dirty, swapcache) for its PFN when readable.  (Redis 7's arm64
 * start-up check asks the same with Shared_Dirty alone.)  A round where the
 * child finds the page mapped but not dirty is printed; the totals last.
 * Run it with its memory mergeable by KSM (tests/guest/ksm-merge) to see
 * whether ksmd merging the page changes the answer.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

/* include/uapi/linux/kernel-page-flags.h */
#define KPF_DIRTY	4
#define KPF_SWAPCACHE	13
#define KPF_KSM		21

struct seen {
	long shared_dirty, shared_clean, private_dirty, private_clean, rss;
	uint64_t pfn, flags;
	int present, flags_ok;
};

static void smaps_of(unsigned long addr, struct seen *s)
{
	char line[256];
	int in = 0;
	FILE *f = fopen("/proc/self/smaps", "r");

	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		unsigned long a, b;

		if (sscanf(line, "%lx-%lx ", &a, &b) == 2) {
			in = a <= addr && addr < b;
			continue;
		}
		if (!in)
			continue;
		sscanf(line, "Rss: %ld", &s->rss);
		sscanf(line, "Shared_Dirty: %ld", &s->shared_dirty);
		sscanf(line, "Shared_Clean: %ld", &s->shared_clean);
		sscanf(line, "Private_Dirty: %ld", &s->private_dirty);
		sscanf(line, "Private_Clean: %ld", &s->private_clean);
	}
	fclose(f);
}

static void pfn_of(unsigned long addr, struct seen *s)
{
	long psz = sysconf(_SC_PAGESIZE);
	uint64_t e;
	int fd = open("/proc/self/pagemap", O_RDONLY);

	if (fd < 0)
		return;
	if (pread(fd, &e, 8, addr / psz * 8) == 8 && (e >> 63) & 1) {
		s->present = 1;
		s->pfn = e & ((1ULL << 55) - 1);
	}
	close(fd);
	if (!s->present || !s->pfn)
		return;
	fd = open("/proc/kpageflags", O_RDONLY);
	if (fd < 0)
		return;
	s->flags_ok = pread(fd, &s->flags, 8, s->pfn * 8) == 8;
	close(fd);
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 100, clean = 0, unmapped = 0;
	long psz = sysconf(_SC_PAGESIZE);

	for (int r = 0; r < rounds; r++) {
		char *p = mmap(NULL, 3 * psz, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		volatile char *q = p + psz;
		int fds[2], status;
		struct seen s;
		pid_t pid;

		if (p == MAP_FAILED || mprotect(p + psz, psz, PROT_READ | PROT_WRITE) ||
		    pipe(fds)) {
			perror("lazyfree_dirty_fork: setup");
			return 2;
		}
		*q = 0;
		if (madvise(p + psz, psz, MADV_FREE)) {
			perror("lazyfree_dirty_fork: MADV_FREE");
			return 2;
		}
		*q = 0;
		pid = fork();
		if (pid < 0) {
			perror("lazyfree_dirty_fork: fork");
			return 2;
		}
		if (pid == 0) {
			memset(&s, 0, sizeof(s));
			smaps_of((unsigned long)q, &s);
			pfn_of((unsigned long)q, &s);
			_exit(write(fds[1], &s, sizeof(s)) == sizeof(s) ? 0 : 1);
		}
		if (read(fds[0], &s, sizeof(s)) != sizeof(s) || waitpid(pid, &status, 0) != pid) {
			fprintf(stderr, "lazyfree_dirty_fork: no answer from the child\n");
			return 2;
		}
		close(fds[0]);
		close(fds[1]);
		if (!s.rss) {
			unmapped++;
		} else if (!s.shared_dirty) {
			clean++;
			printf("round %d: Rss %ld Shared_Dirty %ld Shared_Clean %ld Private_Dirty %ld Private_Clean %ld pfn %#llx flags %#llx%s%s%s\n",
			       r, s.rss, s.shared_dirty, s.shared_clean, s.private_dirty,
			       s.private_clean, (unsigned long long)s.pfn,
			       (unsigned long long)s.flags,
			       (s.flags >> KPF_KSM) & 1 ? " KSM" : "",
			       (s.flags >> KPF_DIRTY) & 1 ? " dirty" : "",
			       (s.flags >> KPF_SWAPCACHE) & 1 ? " swapcache" : "");
		}
		munmap(p, 3 * psz);
	}
	printf("lazyfree_dirty_fork: %d rounds: %d with the page not dirty in the child, %d unmapped there\n",
	       rounds, clean, unmapped);
	return clean ? 1 : 0;
}
