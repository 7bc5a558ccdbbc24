// SPDX-License-Identifier: GPL-2.0
/*
 * Does a child of fork() lose pages that an UNSHARE fault copied in its
 * parent, when the parent then MADV_FREEs them?  wp_page_copy() leaves the
 * copy of an unshare fault clean (clean PTE, folio not dirty, not in the
 * swap cache), so madvise_free_pte_range() marks it lazyfree without the
 * mapcount check even after fork() shared it.
 *   ksm:     identical pages, MADV_MERGEABLE, wait for ksmd, MADV_UNMERGEABLE
 *            (break_ksm(): FAULT_FLAG_UNSHARE), fork, parent MADV_FREE+reclaim
 *   ksmw:    same, but the parent rewrites word 0 of each page after the
 *            unmerge (write fault: dirty PTE) -- control, must be exact
 *   ksmkeep: same, no unmerge (KSM folios are dirty) -- control
 *   pin:     distinct pages, fork a first child (COW-shared), O_DIRECT write
 *            of the region to a loop device (R/O FOLL_PIN: unshare copies),
 *            first child exits, fork, MADV_FREE+reclaim
 * Usage: unshare_free MODE [loopdev]  (root, cgroup v2, ksmd running)
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_MERGEABLE
#define MADV_MERGEABLE 12
#define MADV_UNMERGEABLE 13
#endif
#define SIZE (16UL << 20)
#define NPG (SIZE / 4096)
static int ksm;
static uint64_t pat(uint64_t pg, uint64_t w)
{
	uint64_t t = ksm ? 0x11 + pg % 4 : pg + 100;
	return (t * 0x9e3779b97f4a7c15ULL) ^ (w * 0xff51afd7ed558ccdULL) ^ 1;
}

static void wr(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY);
	if (fd < 0 || write(fd, s, strlen(s)) < 0)
		perror(path);
	if (fd >= 0)
		close(fd);
}

static long merging(void)
{
	char b[64] = "";
	int fd = open("/proc/self/ksm_merging_pages", O_RDONLY);
	if (fd < 0 || read(fd, b, sizeof(b) - 1) < 0)
		return -1;
	close(fd);
	return atol(b);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "ksm";
	char cg[64], buf[96], pid_s[16];
	int go[2], status;
	uint64_t *w;
	pid_t pid;

	ksm = !strncmp(mode, "ksm", 3);
	snprintf(cg, sizeof(cg), "/sys/fs/cgroup/uf%d", getpid());
	mkdir(cg, 0755);
	snprintf(buf, sizeof(buf), "%s/cgroup.procs", cg);
	snprintf(pid_s, sizeof(pid_s), "%d", getpid());
	wr(buf, pid_s);
	w = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	madvise(w, SIZE, MADV_NOHUGEPAGE);
	for (size_t pg = 0; pg < NPG; pg++)
		for (size_t i = 0; i < 512; i++)
			w[pg * 512 + i] = pat(pg, i);
	if (ksm) {
		long m = 0;
		madvise(w, SIZE, MADV_MERGEABLE);
		for (int t = 0; t < 600 && (m = merging()) < (long)NPG * 9 / 10; t++)
			usleep(100000);
		printf("merged %ld of %lu pages; ", m, NPG);
		if (strcmp(mode, "ksmkeep")) {
			if (madvise(w, SIZE, MADV_UNMERGEABLE))
				perror("MADV_UNMERGEABLE");
			printf("after unmerge %ld; ", merging());
		}
		if (!strcmp(mode, "ksmw"))
			for (size_t pg = 0; pg < NPG; pg++)
				w[pg * 512] = pat(pg, 0);
	} else {
		int fd = open(argc > 2 ? argv[2] : "/dev/loop7", O_WRONLY | O_DIRECT);
		pid_t first = fork();
		if (!first) {
			pause();
			_exit(0);
		}
		if (fd < 0 || pwrite(fd, w, SIZE, 0) != (ssize_t)SIZE)
			perror("O_DIRECT write");
		kill(first, SIGKILL);
		waitpid(first, &status, 0);
		close(fd);
	}
	if (pipe(go))
		return 2;
	pid = fork();
	if (!pid) {
		char c;
		size_t bad = 0, zero = 0;

		if (read(go[0], &c, 1) != 1)
			_exit(2);
		for (size_t pg = 0; pg < NPG; pg++) {
			size_t z = 0, b = 0;
			for (size_t i = 0; i < 512; i++) {
				b += w[pg * 512 + i] != pat(pg, i);
				z += w[pg * 512 + i] == 0;
			}
			bad += !!b;
			zero += z == 512;
		}
		printf("child: %zu of %lu pages differ, %zu all zeros; ", bad, NPG, zero);
		fflush(stdout);
		_exit(bad ? 1 : 0);
	}
	if (madvise(w, SIZE, MADV_FREE))
		perror("MADV_FREE");
	snprintf(buf, sizeof(buf), "%s/memory.reclaim", cg);
	for (int i = 0; i < 4; i++)
		wr(buf, "32M");
	if (write(go[1], "g", 1) != 1)
		return 2;
	waitpid(pid, &status, 0);
	wr("/sys/fs/cgroup/cgroup.procs", pid_s);
	rmdir(cg);
	printf("%s %s\n", mode, WEXITSTATUS(status) ? "LOST" : "exact");
	return WEXITSTATUS(status);
}
