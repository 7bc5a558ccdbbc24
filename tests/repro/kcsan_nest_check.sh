#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Checks on a KCSAN kernel that Async-fork leaves KCSAN's per-task
# atomic-nesting state balanced (docs/design.md section 8, "KCSAN's
# nesting count"): the parent's write_protect_seq begins in the forking
# task and ends in whichever task removes the last mark, and an unbalanced
# count would make KCSAN treat every later access of a task as atomic,
# silently (only the negative side WARNs).
#
# A kprobe on release_task() reads kcsan_ctx.atomic_nest_count and
# in_flat_atomic of every task that is released, while async_fork and
# fork_snapshot run with every fork asynchronous and four copy threads.
# The offsets come from the host (the kernel has no BTF and no DWARF):
#   make -C build/linux O=build/kcsan M=DIR off.s, with DIR/off.c using
#   OFFSET() of <linux/kbuild.h> for the three fields.
#
# Usage (as root in a guest of build/kcsan):
#   kcsan_nest_check.sh PID_OFF NEST_OFF FLAT_OFF SELFTESTS_DIR
# Prints one line per unbalanced task and the totals; exits 1 if any task
# was unbalanced, if the probe never fired, or if it read no pid of ours.
set -u
pid_off=$1 nest_off=$2 flat_off=$3 dir=$4
t=/sys/kernel/tracing
mountpoint -q $t || mount -t tracefs none $t
echo "p:kcsan_nest release_task pid=+$pid_off(%di):s32 nest=+$nest_off(%di):s32 flat=+$flat_off(%di):u8" \
	> $t/kprobe_events || exit 2
# Only unbalanced tasks reach the buffer; kprobe_profile counts every hit.
echo 'nest != 0 || flat != 0' > $t/events/kprobes/kcsan_nest/filter
echo 1 > $t/events/kprobes/kcsan_nest/enable
sysctl -qw vm.async_fork=2 vm.async_fork_copy_threads=4

# A task of ours whose pid the probe must read back: checks the offsets.
marker=$(bash -c 'echo $$')
"$dir/async_fork" > /tmp/async_fork.out 2>&1
echo "async_fork: exit $? ($(grep -c '^ok ' /tmp/async_fork.out) ok)"
FORK_SNAPSHOT_EXPECT_ASYNC=1 "$dir/fork_snapshot" > /tmp/fork_snapshot.out 2>&1
echo "fork_snapshot: exit $? ($(grep -c '^ok ' /tmp/fork_snapshot.out) ok)"

# The marker's own release, unfiltered, to check that pid reads right.
echo 0 > $t/events/kprobes/kcsan_nest/enable
echo 0 > $t/events/kprobes/kcsan_nest/filter
echo 1 > $t/events/kprobes/kcsan_nest/enable
probe=$(bash -c 'echo $$')
sleep 1
echo 0 > $t/events/kprobes/kcsan_nest/enable

hits=$(awk '$1 == "kcsan_nest" { print $2 }' $t/kprobe_profile)
# Unbalanced: any event with a non-zero count or flag (the unfiltered
# window above also records its own balanced tasks).
bad=$(grep 'kcsan_nest:' $t/trace | grep -Ev ' nest=0 flat=0$' || true)
nbad=$(printf '%s' "$bad" | grep -c . || true)
seen=$(grep -c "kcsan_nest:.* pid=$probe " $t/trace || true)
echo "kcsan_nest_check: release_task hits $hits, unbalanced tasks $nbad," \
	"pid read back $seen (marker pids $marker, $probe), async forks" \
	"$(awk '$1 == "async_fork" { print $2 }' /proc/vmstat)"
[ -z "$bad" ] || printf '%s\n' "$bad"
[ "$nbad" = 0 ] && [ "${hits:-0}" -gt 0 ] && [ "$seen" -ge 1 ]
