// SPDX-License-Identifier: GPL-2.0
/*
 * async-fork-run: run an unmodified program with Async-fork asked for.
 *
 *   async-fork-run PROGRAM [ARGS...]
 *
 * Sets PR_SET_ASYNC_FORK on itself and execs PROGRAM: the setting survives
 * execve() and is inherited by every process PROGRAM forks, so its forks
 * are asynchronous while vm.async_fork is 1 (the default) or 2.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#ifndef PR_SET_ASYNC_FORK
#define PR_SET_ASYNC_FORK	0x41464b01
#endif

int main(int argc, char **argv)
{
	if (argc < 2 || argv[1][0] == '-') {
		fprintf(stderr, "usage: %s PROGRAM [ARGS...]\n", argv[0]);
		return 2;
	}
	if (prctl(PR_SET_ASYNC_FORK, 1, 0, 0, 0)) {
		fprintf(stderr, "%s: PR_SET_ASYNC_FORK: %s (kernel without Async-fork?)\n",
			argv[0], strerror(errno));
		return 1;
	}
	execvp(argv[1], argv + 1);
	fprintf(stderr, "%s: %s: %s\n", argv[0], argv[1], strerror(errno));
	return 127;
}
