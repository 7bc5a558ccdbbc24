#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
cd /work/main/build/scratch-a64redis || exit 1
L=./ldf; K=/work/main/tests/guest/ksm-merge
run() { sysctl -qw vm.async_fork=$2; echo "RESULT $1 async_fork=$2: $($3 $L 300 | tail -1)"; $3 $L 300 | head -3 | sed 's/^/RESULT   /'; }
run quiet 0 env; run quiet 2 env
bash /work/main/tests/guest/walkers.sh on > walkers2.out 2>&1
sleep 5
run walkers-ksm 0 $K; run walkers-ksm 2 $K; run walkers-plain 2 env; run walkers-ksm 0 $K; run walkers-ksm 2 $K
