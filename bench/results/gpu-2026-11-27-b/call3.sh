#!/usr/bin/env bash
# Device call 3 (2026-11-27 evening, one GPU): compute accuracy for four threads on four streams and
# two processes of one container after the uncharged first drain under a new limit; then the
# eager server at 60% alone on the machine (call 2 ran it beside two other runs).
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=$OUT/build tests/gpu/run.sh none > /dev/null 2>&1 || { echo build failed; tail -30 $OUT/build/build.log; exit 1; }
cat $OUT/build/env.txt
python3 bench/gpu/compute_accuracy.py --lib build/lib/libgpuslice.so --out $OUT/accuracy --seconds 3 --warmup 8 \
  --schedule 100,20,100,30,100,50,100,80,100 --workloads ${ACC_WORKLOADS:-streams4,matmul2p} > $OUT/accuracy.txt 2>&1
echo "== accuracy"; grep -E "^\| |phases pass|timed|rror|->" $OUT/accuracy.txt | head -40
mkdir -p $OUT/eager
python3 bench/gpu/priority_bench.py --lib build/lib/libgpuslice.so --cli build/bin/gpuslice --seconds ${SECONDS_PER:-12} \
  --out $OUT/eager --loads 60 --server-eager > $OUT/eager/log.txt 2>&1
echo "== eager"; grep -iE "goal|p99 ÷|trainer ÷|PASS|FAIL|^\| [0-9-]|priority gate|share" $OUT/eager/log.txt | tail -n 30
grep -h "priority gate" $OUT/eager/logs/*.log 2>/dev/null | head -20
