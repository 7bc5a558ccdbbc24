/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Helpers shared by the project's selftests: a pattern that differs per
 * 8-byte word and per seed, to fill memory and find the first byte that
 * differs, and /proc/vmstat counters.
 */
#ifndef SNAPSHOT_H
#define SNAPSHOT_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Pattern of seed @seed at 8-byte word @i: differs per word and per seed. */
static inline uint64_t pattern(uint64_t seed, uint64_t i)
{
	uint64_t x = (seed << 40) ^ i ^ 0x9e3779b97f4a7c15ULL;

	x ^= x >> 31;
	x *= 0xbf58476d1ce4e5b9ULL;
	return x ^ (x >> 29);
}

static inline void fill(void *mem, size_t size, uint64_t seed)
{
	uint64_t *w = mem;

	for (size_t i = 0; i < size / 8; i++)
		w[i] = pattern(seed, i);
}

/* Offset of the first byte that is not pattern @seed, or -1. */
static inline long mismatch(const void *mem, size_t size, uint64_t seed)
{
	const uint64_t *w = mem;

	for (size_t i = 0; i < size / 8; i++)
		if (w[i] != pattern(seed, i))
			return i * 8;
	return -1;
}

/* A /proc/vmstat counter, or -1 if the kernel has none of that name. */
static inline long vmstat(const char *name)
{
	char key[64];
	long val, ret = -1;
	FILE *f = fopen("/proc/vmstat", "r");

	if (!f)
		return -1;
	while (fscanf(f, "%63s %ld", key, &val) == 2)
		if (!strcmp(key, name)) {
			ret = val;
			break;
		}
	fclose(f);
	return ret;
}

#endif
