#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Runs inside the guest, in the second boot of make test-deb (python/asyncfork/test_deb.py),
# from the run's output folder (the working directory of every program).
#
#   walkers.sh on     make the page-table walkers of Debian's kernel act on
#                     whatever runs next, and note their counters
#   walkers.sh check  KTAP: did each walker act since "on"?
#   walkers.sh verdicts  the comparison that check makes, of the files
#                     walkers.before and walkers.after in the working folder
#
# Debian's kernel enables them, but some act only when asked: KSM merges
# only memory marked mergeable (asyncfork.package starts every program under
# PR_SET_MEMORY_MERGE), DAMON reclaims nothing until it is given a scheme,
# the multi-gen LRU walks page tables only when it ages, which needs
# reclaim, and NUMA balancing needs two nodes (the boot has them).
#
# DAMON reclaim: the scheme of DAMON's reclaim module (page out physical
# memory not accessed for min_age, under its quota), set up through DAMON's
# sysfs interface, not through the module (damon_reclaim), because in
# 6.12.117 the module runs its kdamond without any scheme:
# damon_reclaim_apply_parameters() puts the scheme on the running context
# and then commits a parameter context that has none, and
# damon_commit_schemes() deletes the schemes the source lacks (fixed
# upstream by "mm/damon/reclaim: use parameter context correctly", 2025-07,
# not in 6.12.117). Its nr_reclaim_tried_regions stays 0 whatever its
# parameters (docs/findings/distro-kernel-test-deb.md, section 3).
set -u
lru=/sys/kernel/debug/lru_gen
kd=/sys/kernel/mm/damon/admin/kdamonds
scheme=$kd/0/contexts/0/schemes/0

# The highest generation of any lruvec: it grows each time MGLRU ages.
max_gen() {
	awk 'NF >= 4 && $1 ~ /^[0-9]+$/ && $1 > m { m = $1 } END { print m + 0 }' "$lru"
}

# The reclaim scheme's statistics (DAMON refreshes the files on request).
damon_stats() {
	local f
	echo update_schemes_stats > $kd/0/state 2>/dev/null || true
	for f in nr_tried sz_tried nr_applied sz_applied qt_exceeds; do
		echo "damon_$f $(cat $scheme/stats/$f 2>/dev/null || echo 0)"
	done
}

# Set a kdamond up for DAMON_RECLAIM's scheme on every System RAM range
# of at least 4 MiB (the module's default is only the biggest one, which
# in the 4 GiB two-node guest is node 1 alone), and start it.
damon_reclaim_on() {
	local c=$kd/0/contexts/0 i=0 start end
	echo 1 > $kd/nr_kdamonds
	echo 1 > $kd/0/contexts/nr_contexts
	echo paddr > $c/operations
	# The module's intervals (5 ms sampling, 100 ms aggregation).
	echo 5000 > $c/monitoring_attrs/intervals/sample_us
	echo 100000 > $c/monitoring_attrs/intervals/aggr_us
	echo 10 > $c/monitoring_attrs/nr_regions/min
	echo 1000 > $c/monitoring_attrs/nr_regions/max
	echo 1 > $c/targets/nr_targets
	local line ranges=()
	while IFS= read -r line; do
		[[ $line =~ ^([0-9a-f]+)-([0-9a-f]+)\ :\ System\ RAM$ ]] || continue
		start=$((16#${BASH_REMATCH[1]}))
		end=$((16#${BASH_REMATCH[2]} + 1))
		[ $((end - start)) -ge $((4 << 20)) ] && ranges+=("$start $end")
	done < /proc/iomem
	[ ${#ranges[@]} -gt 0 ] || { echo "# no System RAM in /proc/iomem" >&2; return 1; }
	echo ${#ranges[@]} > $c/targets/0/regions/nr_regions
	for line in "${ranges[@]}"; do
		read -r start end <<< "$line"
		echo "$start" > $c/targets/0/regions/$i/start
		echo "$end" > $c/targets/0/regions/$i/end
		echo "# DAMON region $i: $(printf '%#x-%#x' "$start" "$end")"
		i=$((i + 1))
	done
	# Page out what has not been accessed for 10 aggregations (1 s),
	# oldest first, within the module's quota: 10 ms of work and 128 MiB
	# a second.  No watermarks: always active (the module's default
	# watermarks keep it off while more than 50% of memory is free).
	echo 1 > $c/schemes/nr_schemes
	echo pageout > $scheme/action
	echo 4096 > $scheme/access_pattern/sz/min
	echo 18446744073709551615 > $scheme/access_pattern/sz/max
	echo 0 > $scheme/access_pattern/nr_accesses/min
	echo 0 > $scheme/access_pattern/nr_accesses/max
	echo 10 > $scheme/access_pattern/age/min
	echo 4294967295 > $scheme/access_pattern/age/max
	echo 10 > $scheme/quotas/ms
	echo 134217728 > $scheme/quotas/bytes
	echo 1000 > $scheme/quotas/reset_interval_ms
	echo 0 > $scheme/quotas/weights/sz_permil
	echo 0 > $scheme/quotas/weights/nr_accesses_permil
	echo 1 > $scheme/quotas/weights/age_permil
	echo none > $scheme/watermarks/metric
	echo on > $kd/0/state
	echo "# DAMON kdamond: pid $(cat $kd/0/pid), state $(cat $kd/0/state)"
}

counters() {
	echo "ksm_full_scans $(cat /sys/kernel/mm/ksm/full_scans)"
	echo "ksm_pages_scanned $(cat /sys/kernel/mm/ksm/pages_scanned)"
	damon_stats
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
	damon_reclaim_on
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
	bash "$0" verdicts
	;;
verdicts)	# walkers.before and walkers.after, compared (what check does next)
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
	verdict "DAMON reclaim tried regions and paged out" damon_nr_tried damon_sz_applied
	verdict "MGLRU aged (page-table walks)" lru_gen_max
	;;
*)
	echo "usage: walkers.sh on|check|verdicts" >&2
	exit 2
	;;
esac
