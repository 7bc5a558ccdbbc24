#!/bin/bash
# Runs inside the guest (started by tests/harness.py through scripts/vm.py).
#
# Usage: run-suite.sh OUTDIR SUITE
#
# SUITE has one test program a line: NAME TIMEOUT COMMAND...  For each one
# this writes OUTDIR/NAME.out (its KTAP output), OUTDIR/NAME.rc (its exit
# code, 124 on timeout) and OUTDIR/NAME.dmesg (the kernel log it caused).
# The host judges the results; nothing here decides pass or fail.
set -u
out=$1
suite=$2

uname -r > "$out/kernelrelease"
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
# Reserve hugetlb pages for the tests that use them; THP on madvise.
echo 64 > /proc/sys/vm/nr_hugepages
echo madvise > /sys/kernel/mm/transparent_hugepage/enabled
# Swap on a compressed RAM disk, so that swap-out paths run.
if [ -e /sys/block/zram0/disksize ] && ! grep -q zram0 /proc/swaps; then
	echo 1G > /sys/block/zram0/disksize
	mkswap /dev/zram0 > /dev/null && swapon /dev/zram0
fi
dmesg -c > "$out/boot.dmesg"

while read -r name timeout cmd; do
	case "$name" in ''|'#'*) continue ;; esac
	echo "run-suite: $name" > /dev/kmsg
	start=$(date +%s.%N)
	(cd "$out" && timeout -k 10 "$timeout" bash -c "$cmd") > "$out/$name.out" 2>&1 < /dev/null
	echo $? > "$out/$name.rc"
	echo "$start $(date +%s.%N)" > "$out/$name.time"
	dmesg -c > "$out/$name.dmesg"
done < "$suite"
echo complete > "$out/complete"
