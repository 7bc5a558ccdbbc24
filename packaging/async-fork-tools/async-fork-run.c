// SPDX-License-Identifier: GPL-2.0
/*
 * async-fork-run: run an unmodified program with Async-fork asked for.
 *
 *   async-fork-run [--strict] [--] PROGRAM [ARGS...]
 *
 * Sets PR_SET_ASYNC_FORK on itself and execs PROGRAM: the setting survives
 * execve() and is inherited by every process PROGRAM forks, so its forks
 * are asynchronous while vm.async_fork is 1 (the default) or 2.
 *
 * When the kernel cannot do it (no Async-fork: EINVAL; switched off for
 * this boot, as in a Xen PV guest or with async_fork=off: EOPNOTSUPP) it
 * says so and still runs PROGRAM, which then forks the default way: a
 * service started through it keeps starting after a move to another
 * kernel.  --strict makes that an error (exit status 1) instead.
 * Packaged as async-fork-tools (packaging/async-fork-tools/, man page
 * async-fork-run.1.in).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#ifndef PR_SET_ASYNC_FORK
#define PR_SET_ASYNC_FORK	0x41464b01
#endif

#ifndef AFR_VERSION
#define AFR_VERSION "(built from the source tree)"
#endif

static const char *me = "async-fork-run";

static void usage(FILE *f)
{
	fprintf(f,
		"usage: %s [--strict] [--] PROGRAM [ARGS...]\n"
		"Run PROGRAM with Async-fork asked for (prctl PR_SET_ASYNC_FORK).\n"
		"  --strict   fail (exit 1) instead of warning when the kernel cannot\n"
		"             do Async-fork\n"
		"  --help     this text\n"
		"  --version  the version of async-fork-run\n"
		"See async-fork-run(1).\n", me);
}

/* The value of /proc/sys/vm/async_fork, or -1 if it cannot be read. */
static int vm_async_fork(void)
{
	FILE *f = fopen("/proc/sys/vm/async_fork", "r");
	int v = -1;

	if (!f)
		return -1;
	if (fscanf(f, "%d", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

int main(int argc, char **argv)
{
	const char *level;
	int strict = 0, i, err;

	for (i = 1; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "--")) {
			i++;
			break;
		} else if (!strcmp(argv[i], "--strict")) {
			strict = 1;
		} else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(argv[i], "--version")) {
			printf("async-fork-run %s\n", AFR_VERSION);
			return 0;
		} else {
			fprintf(stderr, "%s: unknown option '%s'\n", me, argv[i]);
			usage(stderr);
			return 2;
		}
	}
	if (i >= argc) {
		usage(stderr);
		return 2;
	}

	if (prctl(PR_SET_ASYNC_FORK, 1, 0, 0, 0)) {
		err = errno;
		level = strict ? "error" : "warning";

		if (err == EINVAL)
			fprintf(stderr,
				"%s: %s: the running kernel has no Async-fork (prctl PR_SET_ASYNC_FORK: %s); "
				"boot a kernel built with CONFIG_ASYNC_FORK=y (package linux-image-*-asyncfork-*)",
				me, level, strerror(err));
		else if (err == EOPNOTSUPP)
			fprintf(stderr,
				"%s: %s: Async-fork is switched off in this boot (a Xen PV guest, "
				"or async_fork=off on the kernel command line; see dmesg | grep async_fork)",
				me, level);
		else
			fprintf(stderr, "%s: %s: prctl PR_SET_ASYNC_FORK: %s", me, level, strerror(err));
		if (strict) {
			fprintf(stderr, "; not starting %s (--strict)\n", argv[i]);
			return 1;
		}
		fprintf(stderr, "; %s runs with the default fork()\n", argv[i]);
	} else if (vm_async_fork() == 0) {
		fprintf(stderr,
			"%s: warning: vm.async_fork is 0: %s forks the default way until it is set to 1 "
			"(sysctl vm.async_fork=1)\n", me, argv[i]);
	}
	execvp(argv[i], argv + i);
	err = errno;
	fprintf(stderr, "%s: %s: %s\n", me, argv[i], strerror(err));
	return err == ENOENT ? 127 : 126;
}
