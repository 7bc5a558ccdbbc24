#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Runs as root in a guest: switches CFS bandwidth control's static key
# (__cfs_bandwidth_used) on and off N times (default 3000) by moving a
# cgroup's cpu.max between a limit and "max", while busy and sleeping
# tasks keep every CPU scheduling.  On 6.12.117 under QEMU 7.2's
# multi-threaded TCG this oopses with int3 in the scheduler within
# seconds (docs/findings/distro-kernel-test-deb.md, section 1).
set -eu
n=${1:-3000}
cg=/sys/fs/cgroup/key-toggle
echo +cpu > /sys/fs/cgroup/cgroup.subtree_control
mkdir -p "$cg"
pids=()
bash -c 'while :; do :; done' & pids+=($!)
echo "${pids[0]}" > "$cg/cgroup.procs"
for _ in 1 2; do bash -c 'while :; do :; done' & pids+=($!); done
for _ in 1 2 3; do bash -c 'while :; do sleep 0.001; done' & pids+=($!); done
start=$(date +%s)
for ((i = 0; i < n; i++)); do
	echo "1000 100000" > "$cg/cpu.max"
	echo max > "$cg/cpu.max"
done
echo "cfs_key_toggle: $n switches in $(( $(date +%s) - start )) s"
kill "${pids[@]}"
wait 2>/dev/null || true
