// SPDX-License-Identifier: GPL-2.0
/*
 * tlbi-count: a QEMU TCG plugin that counts the TLB maintenance
 * instructions (TLBI) an emulated arm64 guest executes, by kind, between
 * two markers that a guest program executes: HINT #124 starts an
 * interval, HINT #125 ends it and writes one line to the output file:
 *
 *   interval N: VAE1IS=512 VALE1IS=513 ASIDE1IS=2 ...
 *
 * The hints are NOPs on hardware and on QEMU without the plugin
 * (forkbench --mark executes them around each fork).  Every vCPU's TLBIs
 * count, whoever runs there: an idle guest adds a few.
 *
 *   qemu-system-aarch64 ... -plugin tlbi-count.so,out=FILE
 *
 * Built against QEMU 7.2's plugin API (qemu-plugin.h next to this file,
 * from Debian's qemu 1:7.2+dfsg-7+deb12u18, include/qemu/qemu-plugin.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qemu-plugin.h"

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

/* SYS #op1, C8, Cm, #op2 (TLBI): key op1:CRm:op2 (3 + 4 + 3 bits). */
#define NKEYS		1024
#define MARK_START	0xd5032f9fu	/* HINT #124 */
#define MARK_END	0xd5032fbfu	/* HINT #125 */

static uint64_t counts[NKEYS], base[NKEYS];
static unsigned long interval;
static FILE *out;

static int is_tlbi(uint32_t insn)
{
	/* SYS (L = 0, op0 = 1) with CRn = 8. */
	return (insn & 0xfff8f000u) == 0xd5088000u;
}

static unsigned int key_of(uint32_t insn)
{
	return ((insn >> 16 & 7) << 7) | ((insn >> 8 & 15) << 3) | (insn >> 5 & 7);
}

/* The EL1 operations Linux uses; others print as op1:CRm:op2. */
static void name_of(unsigned int key, char *buf, size_t len)
{
	static const char * const op2s[8] = {
		"VMALLE1", "VAE1", "ASIDE1", "VAAE1", NULL, "VALE1", NULL, "VAALE1",
	};
	unsigned int op1 = key >> 7, crm = key >> 3 & 15, op2 = key & 7;
	const char *suffix = NULL, *range = "";

	switch (crm) {
	case 1: suffix = "OS"; break;
	case 2: suffix = "IS"; range = "R"; break;
	case 3: suffix = "IS"; break;
	case 5: suffix = "OS"; range = "R"; break;
	case 6: suffix = ""; range = "R"; break;
	case 7: suffix = ""; break;
	}
	if (op1 == 0 && suffix && op2s[op2] && !(*range && op2 % 2 == 0))
		snprintf(buf, len, "%s%s%s", range, op2s[op2], suffix);
	else
		snprintf(buf, len, "op1=%u:CRm=%u:op2=%u", op1, crm, op2);
}

static void on_tlbi(unsigned int vcpu, void *udata)
{
	__atomic_fetch_add(&counts[(uintptr_t)udata], 1, __ATOMIC_RELAXED);
}

static void on_mark(unsigned int vcpu, void *udata)
{
	char name[32];

	if (!udata) {
		for (int k = 0; k < NKEYS; k++)
			base[k] = __atomic_load_n(&counts[k], __ATOMIC_RELAXED);
		return;
	}
	fprintf(out, "interval %lu:", ++interval);
	for (int k = 0; k < NKEYS; k++) {
		uint64_t n = __atomic_load_n(&counts[k], __ATOMIC_RELAXED) - base[k];

		if (!n)
			continue;
		name_of(k, name, sizeof(name));
		fprintf(out, " %s=%" PRIu64, name, n);
	}
	fprintf(out, "\n");
	fflush(out);
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
	size_t n = qemu_plugin_tb_n_insns(tb);

	for (size_t i = 0; i < n; i++) {
		struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
		uint32_t word;

		if (qemu_plugin_insn_size(insn) != 4)
			continue;
		memcpy(&word, qemu_plugin_insn_data(insn), 4);
		if (is_tlbi(word))
			qemu_plugin_register_vcpu_insn_exec_cb(insn, on_tlbi,
				QEMU_PLUGIN_CB_NO_REGS,
				(void *)(uintptr_t)key_of(word));
		else if (word == MARK_START || word == MARK_END)
			qemu_plugin_register_vcpu_insn_exec_cb(insn, on_mark,
				QEMU_PLUGIN_CB_NO_REGS,
				(void *)(uintptr_t)(word == MARK_END));
	}
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id,
					   const qemu_info_t *info,
					   int argc, char **argv)
{
	const char *path = NULL;

	for (int i = 0; i < argc; i++)
		if (!strncmp(argv[i], "out=", 4))
			path = argv[i] + 4;
	if (!path || strcmp(info->target_name, "aarch64")) {
		fprintf(stderr, "tlbi-count: needs out=FILE and an aarch64 guest\n");
		return -1;
	}
	out = fopen(path, "w");
	if (!out) {
		perror(path);
		return -1;
	}
	qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
	return 0;
}
