#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# unshare_free.sh NAME ASYNC RUNS MODE...: in a guest, as root, run
# unshare_free MODE RUNS times for each MODE with vm.async_fork=ASYNC (when
# the kernel has it); KTAP "not ok" if any run found its child's pages lost.
name=$1 async=$2 runs=$3; shift 3
bin=$(dirname "$0")/unshare_free
echo +memory > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null
sysctl -qw vm.async_fork="$async" 2>/dev/null
echo 20 > /sys/kernel/mm/ksm/sleep_millisecs
echo 1000 > /sys/kernel/mm/ksm/pages_to_scan
echo 1 > /sys/kernel/mm/ksm/run
echo "# use_zero_pages $(cat /sys/kernel/mm/ksm/use_zero_pages) async_fork $(sysctl -n vm.async_fork 2>&1) $(uname -r)"
modprobe -q loop 2>/dev/null
truncate -s 32M /dev/shm/uf.img
dev=$(losetup -f --show /dev/shm/uf.img)
echo "# loop $dev"
lost=0 summary=""
for mode in "$@"; do
	l=0
	for _ in $(seq "$runs"); do
		out=$("$bin" "$mode" "$dev") || l=$((l + 1))
		echo "# $out" | tr '\n' ' '; echo
	done
	summary="$summary $mode:$l/$runs"
	lost=$((lost + l))
done
losetup -d "$dev"; rm -f /dev/shm/uf.img
echo "TAP version 13"; echo "1..1"
[ "$lost" = 0 ] && echo "ok 1 $name lost:$summary" || echo "not ok 1 $name lost:$summary"
