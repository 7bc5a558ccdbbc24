#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Runs inside the guest, first in each boot of make test-deb: keeps CFS
# bandwidth control's static key (__cfs_bandwidth_used) on for the whole
# boot, with a cgroup whose cpu.max is a limit that never throttles.
#
# Why: on 6.12.117 under QEMU TCG, switching that key on and off (every
# cpu.max write between a limit and "max" in an otherwise unlimited
# system) can oops with int3 in the scheduler, on Debian's own kernel too
# (docs/findings/distro-kernel-test-deb.md, section 1).  async_fork's
# cgroup cases switch it many times.  With the key held on, their writes
# only change its count: no code is patched.
set -eu
cg=/sys/fs/cgroup/keep-cfs-bandwidth
echo +cpu > /sys/fs/cgroup/cgroup.subtree_control
mkdir -p "$cg"
# 1 s of CPU every 100 ms: ten CPUs' worth, more than the guest has.
echo "1000000 100000" > "$cg/cpu.max"
printf 'TAP version 13\n1..1\nok 1 CFS bandwidth key held on (%s: %s)\n' "$cg" "$(cat "$cg/cpu.max")"
