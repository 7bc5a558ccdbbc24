// SPDX-License-Identifier: GPL-2.0
/*
 * Does the child of fork() lose pages when its parent MADV_FREEs memory
 * that was swapped in without the swap cache (zram: SWP_SYNCHRONOUS_IO)?
 *   1. fill 16 MiB, MADV_PAGEOUT it, read it back (read faults)
 *   2. fork; the parent MADV_FREEs the region and reclaims its cgroup
 *   3. the child compares the region with what was written
 * Usage: madvfree_repro [noswapin]   (run as root, cgroup v2)
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
#include <unistd.h>

#define SIZE (16UL << 20)
static uint64_t pat(uint64_t i) { return (i * 0x9e3779b97f4a7c15ULL) ^ 0x5a5a5a5a12345678ULL; }

static void wr(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY);
	if (fd < 0 || write(fd, s, strlen(s)) < 0)
		perror(path);
	if (fd >= 0)
		close(fd);
}

int main(int argc, char **argv)
{
	int swapin = !(argc > 1 && !strcmp(argv[1], "noswapin"));
	char cg[64], buf[64];
	int go[2];
	uint64_t *w = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	volatile uint64_t sum = 0;
	size_t n = SIZE / 8;

	snprintf(cg, sizeof(cg), "/sys/fs/cgroup/mfr%d", getpid());
	mkdir(cg, 0755);
	snprintf(buf, sizeof(buf), "%s/cgroup.procs", cg);
	snprintf(cg + strlen(cg), 8, "%s", "");
	{
		char pid[16];
		snprintf(pid, sizeof(pid), "%d", getpid());
		wr(buf, pid);
	}
	madvise(w, SIZE, MADV_NOHUGEPAGE);
	for (size_t i = 0; i < n; i++)
		w[i] = pat(i);
	if (swapin) {
		if (madvise(w, SIZE, MADV_PAGEOUT))
			perror("MADV_PAGEOUT");
		for (size_t i = 0; i < n; i += 512)
			sum += w[i];	/* read faults: swap in */
	}
	if (pipe(go))
		return 2;
	pid_t pid = fork();
	if (!pid) {
		char c;
		size_t bad = 0, zero = 0;

		if (read(go[0], &c, 1) != 1)
			_exit(2);
		for (size_t pg = 0; pg < SIZE / 4096; pg++) {
			size_t z = 0, b = 0;
			for (size_t i = pg * 512; i < pg * 512 + 512; i++) {
				b += w[i] != pat(i);
				z += w[i] == 0;
			}
			bad += !!b;
			zero += z == 512;
		}
		printf("child: %zu of %zu pages differ, %zu of them all zeros\n", bad, SIZE / 4096, zero);
		_exit(bad ? 1 : 0);
	}
	if (madvise(w, SIZE, MADV_FREE))
		perror("MADV_FREE");
	snprintf(buf, sizeof(buf), "/sys/fs/cgroup/mfr%d/memory.reclaim", getpid());
	for (int i = 0; i < 4; i++)
		wr(buf, "32M");
	if (write(go[1], "g", 1) != 1)
		return 2;
	int status;
	waitpid(pid, &status, 0);
	snprintf(buf, sizeof(buf), "/sys/fs/cgroup/mfr%d", getpid());
	wr("/sys/fs/cgroup/cgroup.procs", "0");
	{
		char pid_s[16];
		snprintf(pid_s, sizeof(pid_s), "%d", getpid());
		wr("/sys/fs/cgroup/cgroup.procs", pid_s);
	}
	rmdir(buf);
	printf("%s (swap-in first: %s)\n", WEXITSTATUS(status) ? "LOST" : "exact", swapin ? "yes" : "no");
	return WEXITSTATUS(status);
}
