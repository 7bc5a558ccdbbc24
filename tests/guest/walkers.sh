#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Runs inside the guest, in the second boot of make test-deb (tests/deb_suite.py),
# from the run's output folder (the working directory of every program).
#
#   walkers.sh on     make the page-table walkers of Debian's kernel act on
#                     whatever runs next, and note their counters
#   walkers.sh check  KTAP: did each walker act since "on"?
#
# Debian's kernel enables them, but some act only when asked: KSM merges
# only memory marked mergeable (deb_suite.py starts every program under
# PR_SET_MEMORY_MERGE), DAMON's reclaim module starts off, the multi-gen
# LRU walks page tables only when it ages, which needs reclaim, and NUMA
# balancing needs two nodes (the boot has them).
set -u
p=/sys/module/damon_reclaim/parameters
lru=/sys/kernel/debug/lru_gen

# The highest generation of any lruvec: it grows each time MGLRU ages.
max_gen() {
	awk 'NF >= 4 && $1 ~ /^[0-9]+$/ && $1 > m { m = $1 } END { print m + 0 }' "$lru"
}

counters() {
	echo "ksm_full_scans $(cat /sys/kernel/mm/ksm/full_scans)"
	echo "ksm_pages_scanned $(cat /sys/kernel/mm/ksm/pages_scanned)"
	echo "damon_reclaim_tried $(cat $p/nr_reclaim_tried_regions)"
	echo "lru_gen_max $(max_gen)"
	grep -E '^(numa_pte_updates|numa_hint_faults|pgsteal_anon) ' /proc/vmstat
}

# Age every lruvec with a full scan of the page tables (force_scan), the
# way MGLRU ages before it evicts, and ask for some proactive reclaim.
age_and_reclaim() {
	while :; do
		awk '$1 == "memcg" { m = $2 } $1 == "node" { n = $2 }
		     NF >= 4 && $1 ~ /^[0-9]+$/ { s[m " " n] = $1 }
		     END { for (k in s) print "+ " k " " s[k] " 1 1" }' "$lru" |
		while read -r cmd; do
			echo "$cmd" > "$lru"
		done
		echo 16M > /sys/fs/cgroup/memory.reclaim
		sleep 2
	done
}

case "${1:-}" in
on)
	set -e
	mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
	echo "# lru_gen enabled: $(cat /sys/kernel/mm/lru_gen/enabled)"
	echo "# THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled)"
	echo "# numa_balancing: $(cat /proc/sys/kernel/numa_balancing)"
	echo 20 > /sys/kernel/mm/ksm/sleep_millisecs
	echo 1000 > /sys/kernel/mm/ksm/pages_to_scan
	echo 1 > /sys/kernel/mm/ksm/run
	# Reclaim what has not been touched for a second, whatever the free
	# memory (by default it acts only when free memory runs low).
	echo 1000000 > $p/min_age
	echo 1000 > $p/wmarks_high
	echo 999 > $p/wmarks_mid
	echo 0 > $p/wmarks_low
	echo Y > $p/enabled
	# Scan for NUMA hinting faults soon and often (debugfs, SCHED_DEBUG).
	for f in scan_delay_ms:100 scan_period_min_ms:100; do
		echo "${f#*:}" > "/sys/kernel/debug/sched/numa_balancing/${f%:*}" || true
	done
	counters > walkers.before
	sed 's/^/# /' walkers.before
	setsid bash "$0" loop > /dev/null 2>&1 < /dev/null &
	printf 'TAP version 13\n1..1\nok 1 walkers on\n'
	;;
loop)
	age_and_reclaim
	;;
check)
	counters > walkers.after
	echo "TAP version 13"
	echo "1..4"
	n=0
	verdict() {	# NAME KEY... : ok if every KEY grew
		local name=$1 key before after ok=ok
		shift
		for key in "$@"; do
			before=$(awk -v k="$key" '$1 == k { print $2 }' walkers.before)
			after=$(awk -v k="$key" '$1 == k { print $2 }' walkers.after)
			echo "# $key: ${before:-?} -> ${after:-?}"
			if [ -z "$before" ] || [ -z "$after" ] || [ "$after" -le "$before" ]; then
				ok="not ok"
			fi
		done
		n=$((n + 1))
		echo "$ok $n $name"
	}
	verdict "KSM scanned the programs' memory" ksm_full_scans ksm_pages_scanned
	verdict "NUMA balancing unmapped and faulted" numa_pte_updates numa_hint_faults
	verdict "DAMON reclaim tried regions" damon_reclaim_tried
	verdict "MGLRU aged (page-table walks)" lru_gen_max
	;;
*)
	echo "usage: walkers.sh on|check" >&2
	exit 2
	;;
esac
