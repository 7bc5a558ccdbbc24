/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Kernel knobs for the project's selftests: small files in /proc, /sys and
 * debugfs, kernel symbols, and fault injection scoped to a range of kernel
 * code by the stack-trace filter (CONFIG_FAULT_INJECTION_STACKTRACE_FILTER).
 */
#ifndef KNOBS_H
#define KNOBS_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAIL_ALLOC	"/sys/kernel/debug/fail_page_alloc/"
#define FAIL_SLAB	"/sys/kernel/debug/failslab/"

/* Write @val to @path; returns 0 or the errno of the failed write. */
static inline int write_file(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY);
	int err = 0;

	if (fd < 0)
		return errno;
	if (write(fd, val, strlen(val)) < 0)
		err = errno;
	close(fd);
	return err;
}

static inline long read_long(const char *path)
{
	char buf[64] = "";
	int fd = open(path, O_RDONLY);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	return n > 0 ? strtol(buf, NULL, 0) : -1;
}

static inline int write_long(const char *path, long val)
{
	char buf[24];

	snprintf(buf, sizeof(buf), "%ld", val);
	return write_file(path, buf);
}

/* The value of a "Key: value kB" line of @path (/proc/meminfo, status), or -1. */
static inline long proc_kb(const char *path, const char *key)
{
	char line[128], name[64];
	long kb, ret = -1;
	FILE *f = fopen(path, "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%63[^:]: %ld", name, &kb) == 2 && !strcmp(name, key)) {
			ret = kb;
			break;
		}
	fclose(f);
	return ret;
}

/* A /proc/meminfo field in KiB, or -1. */
static inline long meminfo_kb(const char *key)
{
	return proc_kb("/proc/meminfo", key);
}

/*
 * The code of the text symbols that @match accepts, in /proc/kallsyms:
 * from the lowest such symbol to the next symbol after the highest.
 * Returns the number of symbols accepted, or -1.
 */
static inline int code_range(int (*match)(const char *name),
			     unsigned long *start, unsigned long *end)
{
	char line[256], name[128], type;
	unsigned long addr, last = 0;
	FILE *f = fopen("/proc/kallsyms", "r");
	int n = 0;

	if (!f)
		return -1;
	*start = ~0UL;
	*end = 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%lx %c %127s", &addr, &type, name) == 3 &&
		    (type == 't' || type == 'T') && addr && match(name)) {
			n++;
			if (addr < *start)
				*start = addr;
			if (addr > last)
				last = addr;
		}
	if (!n) {
		fclose(f);
		return -1;
	}
	rewind(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%lx %c %127s", &addr, &type, name) == 3 &&
		    addr > last && (!*end || addr < *end))
			*end = addr;
	fclose(f);
	return *end ? n : -1;
}

/*
 * Make the fault-injection attribute in @dir (FAIL_ALLOC or FAIL_SLAB) fail
 * @percent of the allocations made with [@start, @end) on the stack, for
 * every task.  Returns 0, or -1 if the stack filter is missing.
 */
static inline int inject_failures(const char *dir, unsigned long start,
				  unsigned long end, int percent)
{
	static const char *const settings[][2] = {
		{ "task-filter", "N" }, { "ignore-gfp-wait", "N" },
		{ "ignore-gfp-highmem", "N" }, { "min-order", "0" },
		{ "stacktrace-depth", "32" }, { "verbose", "0" },
		{ "interval", "1" }, { "times", "-1" },
	};
	char path[256], val[24];

	snprintf(path, sizeof(path), "%srequire-start", dir);
	snprintf(val, sizeof(val), "%lu", start);
	if (write_file(path, val))
		return -1;
	snprintf(path, sizeof(path), "%srequire-end", dir);
	snprintf(val, sizeof(val), "%lu", end);
	write_file(path, val);
	/* Not every attribute has every file (failslab has no min-order). */
	for (size_t i = 0; i < (sizeof(settings) / sizeof(settings[0])); i++) {
		snprintf(path, sizeof(path), "%s%s", dir, settings[i][0]);
		write_file(path, settings[i][1]);
	}
	snprintf(path, sizeof(path), "%sprobability", dir);
	return write_long(path, percent) ? -1 : 0;
}

static inline void stop_failures(const char *dir)
{
	char path[256];

	snprintf(path, sizeof(path), "%sprobability", dir);
	write_file(path, "0");
}

#endif
