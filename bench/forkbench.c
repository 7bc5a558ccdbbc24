// SPDX-License-Identifier: GPL-2.0
/*
 * forkbench: how long fork() keeps a process with a large resident heap out
 * of service, and how long until its child can run.
 *
 *   forkbench --size-mb N [--thp] [--async] [--repeat R] [--touch] [--hogs H]
 *             [--mark]
 *
 * Maps N MiB of anonymous memory (4 KiB pages, or THP with --thp), writes
 * every page, then forks R times; with --async it first asks for Async-fork
 * (prctl PR_SET_ASYNC_FORK, honoured while vm.async_fork is 1 or 2).  For
 * each fork it prints one JSON line:
 *
 *   fork_us   time the parent spent inside fork()
 *   child_us  time from the fork() call until the child ran its first
 *             user instruction (with Async-fork: after its page-table copy)
 *   copy_threads  vm.async_fork_copy_threads at the time (0: no such sysctl)
 *
 * --mark: on arm64, HINT #124 right before each fork() and HINT #125 once
 * its child is reaped (after the touches): NOPs, but the QEMU plugin
 * bench/qemu/tlbi-count.c counts the guest's TLB invalidations between
 * them (make bench-tlbi).
 *
 * --touch: right after fork() the parent writes one word in each 2 MiB of
 * the heap, in a shuffled order (as a server's writes land), and times each
 * write: with the default fork a copy-on-write fault, with Async-fork also
 * the wait for that PTE table's copy (its own, or the one a copier holding
 * the table's lock is making).  Adds touch_n, touch_p50_us, touch_p99_us,
 * touch_max_us and touch_over_1ms (writes slower than 1 ms).  --hogs H
 * keeps H busy-looping processes running meanwhile, so that the copiers
 * and the parent compete for CPUs.
 *
 * The child also checks one word per page against the pre-fork contents, so
 * a benchmark run cannot report figures from a broken snapshot.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef PR_SET_ASYNC_FORK
#define PR_SET_ASYNC_FORK	0x41464b01
#endif

/* See --mark; nothing elsewhere than on arm64. */
static void mark(int end)
{
#ifdef __aarch64__
	if (end)
		asm volatile("hint #125" ::: "memory");
	else
		asm volatile("hint #124" ::: "memory");
#else
	(void)end;
#endif
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static long copy_threads(void)
{
	FILE *f = fopen("/proc/sys/vm/async_fork_copy_threads", "r");
	long n = 0;

	if (f) {
		if (fscanf(f, "%ld", &n) != 1)
			n = 0;
		fclose(f);
	}
	return n;
}

static void usage(const char *argv0)
{
	fprintf(stderr, "usage: %s --size-mb N [--thp] [--async] [--repeat R] "
		"[--touch] [--hogs H] [--mark]\n", argv0);
	exit(2);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* H processes that spin until killed (or until their parent dies). */
static pid_t *start_hogs(long h)
{
	pid_t *pids = calloc(h + 1, sizeof(*pids));

	for (long i = 0; pids && i < h; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			for (;;)
				;
		}
	}
	return pids;
}

/*
 * Write one word in each 2 MiB of @mem in the order of @order, timing each
 * write into @ns; returns the word's old values in @old (to put back).
 */
static void touch(char *mem, const size_t *order, size_t n, uint64_t *ns,
		  uint64_t *old)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t *w = (uint64_t *)(mem + (order[i] << 21));
		uint64_t t = now_ns();

		old[i] = *w;
		*w = ~old[i];
		ns[i] = now_ns() - t;
	}
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "size-mb", required_argument, NULL, 's' },
		{ "thp", no_argument, NULL, 't' },
		{ "repeat", required_argument, NULL, 'r' },
		{ "async", no_argument, NULL, 'a' },
		{ "touch", no_argument, NULL, 'T' },
		{ "hogs", required_argument, NULL, 'h' },
		{ "mark", no_argument, NULL, 'm' },
		{ }
	};
	long size_mb = 0, repeat = 3, page = sysconf(_SC_PAGESIZE), threads;
	long hogs = 0;
	int thp = 0, async = 0, do_touch = 0, do_mark = 0, c;
	size_t size, off, n = 0, *order = NULL;
	uint64_t *ns = NULL, *old = NULL;
	pid_t *hog_pids = NULL;
	char *mem, *end;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			size_mb = strtol(optarg, &end, 10);
			if (*end || size_mb <= 0)
				usage(argv[0]);
			break;
		case 't':
			thp = 1;
			break;
		case 'a':
			async = 1;
			break;
		case 'r':
			repeat = strtol(optarg, &end, 10);
			if (*end || repeat <= 0)
				usage(argv[0]);
			break;
		case 'T':
			do_touch = 1;
			break;
		case 'm':
			do_mark = 1;
			break;
		case 'h':
			hogs = strtol(optarg, &end, 10);
			if (*end || hogs < 0 || hogs > 64)
				usage(argv[0]);
			break;
		default:
			usage(argv[0]);
		}
	}
	if (!size_mb || optind != argc)
		usage(argv[0]);

	if (async && prctl(PR_SET_ASYNC_FORK, 1, 0, 0, 0)) {
		perror("prctl(PR_SET_ASYNC_FORK): kernel without Async-fork?");
		return 1;
	}
	size = (size_t)size_mb << 20;
	mem = mmap(NULL, size, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (mem == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	if (madvise(mem, size, thp ? MADV_HUGEPAGE : MADV_NOHUGEPAGE)) {
		perror("madvise");
		return 1;
	}
	for (off = 0; off < size; off += page)
		*(uint64_t *)(mem + off) = off ^ 0x5a5a5a5a;
	threads = copy_threads();
	if (do_touch) {
		n = size >> 21;
		order = calloc(n, sizeof(*order));
		ns = calloc(n, sizeof(*ns));
		old = calloc(n, sizeof(*old));
		if (!n || !order || !ns || !old) {
			fprintf(stderr, "forkbench: --touch needs at least 2 MiB\n");
			return 1;
		}
		/* The same shuffled order in every run: a fixed seed. */
		srandom(1);
		for (size_t i = 0; i < n; i++)
			order[i] = i;
		for (size_t i = n - 1; i > 0; i--) {
			size_t j = random() % (i + 1), t = order[i];

			order[i] = order[j];
			order[j] = t;
		}
	}
	if (hogs) {
		hog_pids = start_hogs(hogs);
		if (!hog_pids) {
			perror("hogs");
			return 1;
		}
	}

	for (long i = 0; i < repeat; i++) {
		int p[2], status;
		uint64_t t0, t1, tc = 0;
		pid_t pid;

		if (pipe(p)) {
			perror("pipe");
			return 1;
		}
		if (do_mark)
			mark(0);
		t0 = now_ns();
		pid = fork();
		if (pid == 0) {
			uint64_t t = now_ns();

			if (write(p[1], &t, sizeof(t)) != sizeof(t))
				_exit(2);
			for (off = 0; off < size; off += page)
				if (*(uint64_t *)(mem + off) != (off ^ 0x5a5a5a5a))
					_exit(1);
			_exit(0);
		}
		t1 = now_ns();
		if (pid < 0) {
			perror("fork");
			return 1;
		}
		if (do_touch)
			touch(mem, order, n, ns, old);
		if (read(p[0], &tc, sizeof(tc)) != sizeof(tc) ||
		    waitpid(pid, &status, 0) != pid) {
			perror("child");
			return 1;
		}
		if (do_mark)
			mark(1);
		if (!WIFEXITED(status) || WEXITSTATUS(status)) {
			fprintf(stderr, "forkbench: child saw a wrong snapshot\n");
			return 1;
		}
		printf("{\"size_mb\": %ld, \"thp\": %s, \"async\": %s, \"fork_us\": %.1f, "
		       "\"child_us\": %.1f, \"copy_threads\": %ld", size_mb,
		       thp ? "true" : "false", async ? "true" : "false",
		       (t1 - t0) / 1e3, (tc - t0) / 1e3, threads);
		if (do_touch) {
			size_t over = 0;

			/* Put the words back for the next child's check. */
			for (size_t k = 0; k < n; k++) {
				*(uint64_t *)(mem + (order[k] << 21)) = old[k];
				over += ns[k] > 1000000;
			}
			qsort(ns, n, sizeof(*ns), cmp_u64);
			printf(", \"hogs\": %ld, \"touch_n\": %zu, \"touch_p50_us\": %.1f, "
			       "\"touch_p99_us\": %.1f, \"touch_max_us\": %.1f, "
			       "\"touch_over_1ms\": %zu", hogs, n, ns[n / 2] / 1e3,
			       ns[n * 99 / 100] / 1e3, ns[n - 1] / 1e3, over);
		}
		printf("}\n");
		fflush(stdout);
		close(p[0]);
		close(p[1]);
	}
	for (long i = 0; hog_pids && i < hogs; i++) {
		kill(hog_pids[i], SIGKILL);
		waitpid(hog_pids[i], NULL, 0);
	}
	return 0;
}
