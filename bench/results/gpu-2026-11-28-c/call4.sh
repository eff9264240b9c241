#!/usr/bin/env bash
# Device call 4 of 2026-11-28-c (one H200): compute limits for two processes of one container
# (graph2p, matmul2p at 40/70%, after the 25 ms queued-work bound), then the trainer beside an idle
# high tenant under MPS with the released bound at 50 ms (short paired run at 30% load).
set -uo pipefail
export PYTHONUNBUFFERED=1
R=$OUT; W=/tmp/c4; mkdir -p $W
OUT=$W/build tests/gpu/run.sh none > $R/build.txt 2>&1 || { echo build failed; tail -30 $R/build.txt; exit 1; }
timeout 330 python3 bench/gpu/compute_accuracy.py --lib build/lib/libgpuslice.so --out $W/two-process \
  --seconds 3 --schedule 100,40,100,70,100,40,100,70,100 --workloads graph2p,matmul2p \
  --kernel-timeline build/gpu/libkernel_timeline.so > $R/two-process.txt 2>&1
echo "two-process: exit $?"
timeout 170 python3 bench/gpu/priority_bench.py --lib build/lib/libgpuslice.so --cli build/bin/gpuslice --mps \
  --paired --loads 30 --only-priorities --seconds 8 --alone-seconds 10 --out $W/idle-mps > $R/idle-mps.txt 2>&1
echo "idle-mps: exit $?"
tar czf $R/c4.tgz -C $W --exclude build . 2>/dev/null
tail -n 40 $R/two-process.txt; grep -E "alone|idle high|paired priorities" $R/idle-mps.txt | tail -n 8
