#!/usr/bin/env bash
# Device call 4: the eager server at 60% again, after the device share's slower mean.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=$OUT/build tests/gpu/run.sh none > /dev/null 2>&1 || { echo build failed; tail -30 $OUT/build/build.log; exit 1; }
mkdir -p $OUT/eager
python3 bench/gpu/priority_bench.py --lib build/lib/libgpuslice.so --cli build/bin/gpuslice --seconds ${SECONDS_PER:-12} \
  --out $OUT/eager --loads 60 --server-eager > $OUT/eager/log.txt 2>&1
echo "== eager"; grep -iE "goal|p99 ÷|trainer ÷|PASS|FAIL|^\| [0-9-]" $OUT/eager/log.txt | tail -n 30
grep -h "priority gate, device" $OUT/eager/logs/*.log 2>/dev/null | head; grep -hc "priority gate: held" $OUT/eager/logs/*.log 2>/dev/null | head
