#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Runs inside the guest (started by asyncfork.suite through asyncfork.vm).
#
# Usage: [SWAP=zram|loop] [THP=keep] [STOP_ON_OOPS=1] run-suite.sh OUTDIR SUITE
#
# SUITE has one test program a line: NAME TIMEOUT RETRIES COMMAND...  For
# each one this writes OUTDIR/NAME.out (its KTAP output), OUTDIR/NAME.rc (its
# exit code, 124 on timeout), OUTDIR/NAME.dmesg (the kernel log it caused)
# and OUTDIR/NAME.stamps (each output line with the time it came).
# A run that exits non-zero is repeated up to RETRIES times; the output of
# each failed run is kept as NAME.out.failedN and the kernel log of every
# run goes to NAME.dmesg.  A run still going at its timeout leaves the state,
# wait channel and kernel stack of every task in NAME.hang before it is
# killed, so that a hang can be told from a slow run.  With STOP_ON_OOPS=1
# (make mutate), a program after which the kernel is tainted by an oops
# (taint D: a task died in the kernel, maybe holding locks) is the last:
# OUTDIR/stopped says which; the programs after it would run on a broken
# kernel.  The host judges the results; nothing here decides pass or fail.
set -u
out=$1
suite=$2

uname -r > "$out/kernelrelease"
# A distribution kernel (make test-deb) has these as modules: zram for the
# swap below, loop for fork_stress's O_DIRECT.  Built in elsewhere.
modprobe -q zram 2>/dev/null
modprobe -q loop 2>/dev/null
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
# A root other than the host's (ARCH=arm64: setup-arm64.sh's, over 9p)
# leaves /tmp unwritable to other users, whom stress-ng's madvise run
# needs: a tmpfs there, only then.
setpriv --reuid=65534 --regid=65534 --clear-groups test -w /tmp 2>/dev/null ||
	mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp
# Reserve hugetlb pages for the tests that use them; THP on madvise, or
# as the kernel set it with THP=keep (make test-deb: Debian's "always").
echo 64 > /proc/sys/vm/nr_hugepages
[ "${THP:-madvise}" = keep ] || echo madvise > /sys/kernel/mm/transparent_hugepage/enabled
# Swap, so that swap-out paths run: on a compressed RAM disk (zram), or
# with SWAP=loop on a loop device over tmpfs, where every swap-in goes
# through the swap cache (zram's may skip it: docs/findings/memcg-zeros.md).
if [ "$(wc -l < /proc/swaps)" -le 1 ]; then
	if [ "${SWAP:-zram}" = loop ]; then
		mkdir -p /run/swapfs
		mount -t tmpfs -o size=1100M none /run/swapfs
		truncate -s 1G /run/swapfs/swap
		dev=$(losetup -f --show /run/swapfs/swap) &&
			mkswap "$dev" > /dev/null && swapon "$dev"
	elif [ -e /sys/block/zram0/disksize ]; then
		echo 1G > /sys/block/zram0/disksize
		mkswap /dev/zram0 > /dev/null && swapon /dev/zram0
	fi
fi
cp /proc/swaps "$out/swaps"
dmesg -c > "$out/boot.dmesg"

# Every user task, and every kernel thread not idle: state, wait channel,
# kernel stack.  Shell builtins only: under emulation a fork costs tens of
# milliseconds, and a hundred tasks must fit in the seconds before the kill.
dump_tasks() {
	local t key val state cmd comm wchan line
	for t in /proc/[0-9]*/task/[0-9]*; do
		state=
		while read -r key val; do
			if [ "$key" = State: ]; then
				state=$val
				break
			fi
		done 2>/dev/null < "$t/status" || continue
		# A kernel thread has an empty command line (its size reads 0 for all).
		cmd='' comm='' wchan=''
		IFS= read -r -d '' cmd 2>/dev/null < "$t/cmdline"
		if [ -z "$cmd" ]; then
			case "$state" in S*|I*) continue ;; esac
		fi
		read -r comm 2>/dev/null < "$t/comm"
		read -r wchan 2>/dev/null < "$t/wchan"
		echo "== ${t#/proc/} $comm $state wchan=$wchan"
		while IFS= read -r line; do
			echo "$line"
		done 2>/dev/null < "$t/stack"
	done
}

# Sleeps @1 seconds, then writes the tasks to @2.  Killed before that when
# the run ends; once dumping, it finishes first (the run ends meanwhile).
watchdog() {
	local nap
	trap 'kill "$nap" 2>/dev/null; exit 0' TERM
	sleep "$1" & nap=$!
	wait "$nap"
	trap '' TERM
	dump_tasks > "$2" 2>&1
}

# Each line of standard input with the time it came (seconds since the
# epoch, to 0.2 s) to the file $1: how long each case of a program took.
stamp() {
	local line

	: > "$1"
	while IFS= read -r line || [ -n "$line" ]; do
		printf '%s %s\n' "$EPOCHREALTIME" "$line" >> "$1"
	done
}

while read -r name timeout retries cmd; do
	case "$name" in ''|'#'*) continue ;; esac
	: > "$out/$name.dmesg"
	run=0
	while :; do
		echo "run-suite: $name (run $((run + 1)))" > /dev/kmsg
		start=$(date +%s.%N)
		watchdog "$timeout" "$out/$name.hang" & dog=$!
		(cd "$out" && timeout -k 10 "$((timeout + 5))" bash -c "$cmd") > "$out/$name.out" 2>&1 < /dev/null &
		prog=$!
		# Read from the file, not a pipe: a task the program left behind
		# may hold its output open long after the program ended.
		tail -s 0.2 -n +1 -f --pid="$prog" "$out/$name.out" | stamp "$out/$name.stamps" &
		stamper=$!
		wait "$prog"
		rc=$?
		wait "$stamper"
		kill "$dog" 2>/dev/null
		wait "$dog"
		echo "$start $(date +%s.%N)" > "$out/$name.time"
		dmesg -c >> "$out/$name.dmesg"
		run=$((run + 1))
		if [ "$rc" = 0 ] || [ "$run" -gt "$retries" ]; then
			break
		fi
		mv "$out/$name.out" "$out/$name.out.failed$run"
	done
	echo "$rc" > "$out/$name.rc"
	if [ "${STOP_ON_OOPS:-}" = 1 ] && [ $(($(cat /proc/sys/kernel/tainted) & 128)) -ne 0 ]; then
		echo "$name" > "$out/stopped"
		break
	fi
done < "$suite"
echo complete > "$out/complete"
