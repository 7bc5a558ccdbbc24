// SPDX-License-Identifier: GPL-2.0
/*
 * offcost: what the paths that Async-fork hooks cost, for comparing kernels
 * that differ only in the series (unpatched, CONFIG_ASYNC_FORK=y with
 * vm.async_fork=0, CONFIG_ASYNC_FORK=n).  Each test is a loop in the style
 * of the kernel's own micro-benchmarks; one line per test and run:
 *
 *   RESULT <test> <run> <value> <unit>
 *
 *   fork_exit    fork() + _exit() + waitpid() of this small process   us/op
 *   fork_1g      fork() of a process with 1 GiB of 4 KiB-mapped memory ms/op
 *   write_fault  first write to an anonymous page                     ns/op
 *   mprotect     mprotect() of a populated 2 MiB VMA, RO then RW       ns/op
 *   mmap_munmap  mmap + one write + munmap of 64 KiB                   ns/op
 *   odirect      O_DIRECT read of 64 KiB from a block device (GUP-fast) us/op
 *   madv_free    MADV_FREE of 2 MiB of dirty 4 KiB pages, per page      ns/page
 *                (mm-fixes patch 3 takes each folio's lock it looks at)
 *
 * Usage: offcost [--runs N] [--only TEST] [--blockdev DEV]
 * odirect runs only with --blockdev (a loop device over a tmpfs file, say).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PAGE	4096UL
#define MB	(1UL << 20)

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static char *map_anon(size_t len, int populate)
{
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		die("mmap");
	/* 4 KiB pages: THP would make the PTE-level paths disappear. */
	madvise(p, len, MADV_NOHUGEPAGE);
	if (populate)
		for (size_t i = 0; i < len; i += PAGE)
			p[i] = 1;
	return p;
}

static void wait_child(pid_t pid)
{
	int st;

	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
		die("child");
}

static double t_fork_exit(void)
{
	const int n = 500;
	double t0 = now_ns();

	for (int i = 0; i < n; i++) {
		pid_t pid = fork();

		if (pid < 0)
			die("fork");
		if (!pid)
			_exit(0);
		wait_child(pid);
	}
	return (now_ns() - t0) / n / 1e3;
}

static double t_fork_1g(void)
{
	const int n = 5;
	char *p = map_anon(1024 * MB, 1);
	double sum = 0;

	for (int i = 0; i < n; i++) {
		double t0 = now_ns();
		pid_t pid = fork();

		if (pid < 0)
			die("fork");
		if (!pid)
			_exit(0);
		sum += now_ns() - t0;
		wait_child(pid);
	}
	munmap(p, 1024 * MB);
	return sum / n / 1e6;
}

static double t_write_fault(void)
{
	const size_t len = 128 * MB;
	char *p = map_anon(len, 0);
	double t0 = now_ns();

	for (size_t i = 0; i < len; i += PAGE)
		p[i] = 1;
	t0 = now_ns() - t0;
	munmap(p, len);
	return t0 / (len / PAGE);
}

static double t_mprotect(void)
{
	const int n = 5000;
	char *p = map_anon(2 * MB, 1);
	double t0 = now_ns();

	for (int i = 0; i < n; i++) {
		if (mprotect(p, 2 * MB, PROT_READ) || mprotect(p, 2 * MB, PROT_READ | PROT_WRITE))
			die("mprotect");
	}
	t0 = now_ns() - t0;
	munmap(p, 2 * MB);
	return t0 / (2 * n);
}

static double t_mmap_munmap(void)
{
	const int n = 5000;
	double t0 = now_ns();

	for (int i = 0; i < n; i++) {
		char *p = mmap(NULL, 64 * 1024, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (p == MAP_FAILED)
			die("mmap");
		p[0] = 1;
		munmap(p, 64 * 1024);
	}
	return (now_ns() - t0) / n;
}

static double t_madv_free(void)
{
	const size_t len = 2 * MB;
	const int n = 2000;
	char *p = map_anon(len, 1);
	double sum = 0;

	for (int i = 0; i < n; i++) {
		double t0;

		/* Dirty again what the last MADV_FREE made lazily free. */
		for (size_t off = 0; off < len; off += PAGE)
			p[off] = (char)i;
		t0 = now_ns();
		if (madvise(p, len, MADV_FREE))
			die("madvise");
		sum += now_ns() - t0;
	}
	munmap(p, len);
	return sum / n / (len / PAGE);
}

static const char *blockdev;

static double t_odirect(void)
{
	const size_t chunk = 64 * 1024;
	const int n = 2000;
	int fd = open(blockdev, O_RDONLY | O_DIRECT);
	off_t size;
	char *buf;
	double t0;

	if (fd < 0)
		die(blockdev);
	size = lseek(fd, 0, SEEK_END);
	if (size < (off_t)chunk)
		die("block device too small");
	buf = map_anon(chunk, 1);
	t0 = now_ns();
	for (int i = 0; i < n; i++) {
		off_t off = (off_t)(i * chunk) % (size - size % chunk);

		if (pread(fd, buf, chunk, off) != (ssize_t)chunk)
			die("pread");
	}
	t0 = now_ns() - t0;
	close(fd);
	munmap(buf, chunk);
	return t0 / n / 1e3;
}

static const struct test {
	const char *name, *unit;
	double (*fn)(void);
} tests[] = {
	{ "fork_exit", "us/op", t_fork_exit },
	{ "fork_1g", "ms/op", t_fork_1g },
	{ "write_fault", "ns/op", t_write_fault },
	{ "mprotect", "ns/op", t_mprotect },
	{ "mmap_munmap", "ns/op", t_mmap_munmap },
	{ "odirect", "us/op", t_odirect },
	{ "madv_free", "ns/page", t_madv_free },
};

int main(int argc, char **argv)
{
	const char *only = NULL;
	int runs = 5;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
			runs = atoi(argv[++i]);
		} else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
			only = argv[++i];
		} else if (!strcmp(argv[i], "--blockdev") && i + 1 < argc) {
			blockdev = argv[++i];
		} else {
			fprintf(stderr, "usage: offcost [--runs N] [--only TEST] [--blockdev DEV]\n");
			return 2;
		}
	}
	if (runs < 1) {
		fprintf(stderr, "offcost: --runs must be at least 1\n");
		return 2;
	}
	if (only) {
		size_t i;

		for (i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
			if (!strcmp(tests[i].name, only))
				break;
		if (i == sizeof(tests) / sizeof(tests[0])) {
			fprintf(stderr, "offcost: no test '%s'\n", only);
			return 2;
		}
	}
	/* Runs outermost: a slow phase of the machine hits every test alike. */
	for (int r = 0; r < runs; r++) {
		for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
			const struct test *t = &tests[i];

			if (only && strcmp(only, t->name))
				continue;
			if (t->fn == t_odirect && !blockdev)
				continue;
			printf("RESULT %s %d %.3f %s\n", t->name, r, t->fn(), t->unit);
			fflush(stdout);
		}
	}
	return 0;
}
