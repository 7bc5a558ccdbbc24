#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Redis's arm64 start-up check under the walkers of test-deb, Async-fork
# off and on, KSM merging for Redis on and off: how often it refuses.
cd /work/main/build/scratch-a64redis || exit 1
sysctl -qw vm.overcommit_memory=1
bash /work/main/tests/guest/walkers.sh on > walkers.out 2>&1
swapon --show
try() {  # label, async_fork, wrapper...
	local label=$1 af=$2 bad=0 n=12 i; shift 2
	sysctl -qw vm.async_fork=$af
	for i in $(seq $n); do
		rm -f r.log
		timeout 60 "$@" redis-server --port 0 --unixsocket /tmp/r.sock --save '' \
			--logfile /work/main/build/scratch-a64redis/r.log --daemonize no &
		local pid=$!
		sleep 6
		kill $pid 2>/dev/null; wait $pid 2>/dev/null
		grep -q 'ARM64-COW-BUG' r.log && bad=$((bad + 1))
	done
	echo "RESULT $label async_fork=$af: refused $bad of $n"
}
try ksm-merge 0 /work/main/tests/guest/ksm-merge
try ksm-merge 2 /work/main/tests/guest/ksm-merge
try plain 2 env
try plain 0 env
grep -h 'ksm\|damon' walkers.out | head -5
