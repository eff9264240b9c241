#!/usr/bin/env bash
# Device call 2 (2026-11-28, a 4-GPU machine): priority sharing, paired, one run per GPU side by side.
# GPU 0: 7 ms graph requests at 30% and 60%, the defaults (bound sized by the server's requests)
# against the whole bound; GPU 1: 2 ms requests at 30%, the same two; GPU 3: 2 ms requests again
# (other CPUs), the defaults against a 10% request share; GPU 2: the eager server at 60%,
# un-managed, the defaults (every higher one holds) and light servers not holding (LIGHT_SHARE=50).
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=$OUT/build tests/gpu/run.sh none > /dev/null 2>&1 || { echo build failed; tail -30 $OUT/build/build.log; exit 1; }
cat $OUT/build/env.txt
bench=(python3 bench/gpu/priority_bench.py --lib build/lib/libgpuslice.so --cli build/bin/gpuslice --seconds ${SECONDS_PER:-12})
prio() {  # name gpu args...
  local name=$1 gpu=$2; shift 2; mkdir -p $OUT/$name
  CUDA_VISIBLE_DEVICES=$gpu "${bench[@]}" --out $OUT/$name "$@" > $OUT/$name/log.txt 2>&1; echo "$name: exit $?"
}
whole="whole;trainer:GPUSLICE_PRIORITY_REQUEST_SHARE=0"
prio req7ms 0 --paired --only-priorities --loads 30,60 --variant "$whole" &
prio req2ms 1 --paired --only-priorities --loads 30 --server-batch 4 --server-tokens 256 --cpu-offset 10 --variant "$whole" &
prio eager 2 --paired --loads 60 --server-eager --cpu-offset 20 --variant "light;trainer:GPUSLICE_PRIORITY_LIGHT_SHARE=50" &
prio req2ms-b 3 --paired --only-priorities --loads 30 --server-batch 4 --server-tokens 256 --cpu-offset 40 \
  --variant "rs10;trainer:GPUSLICE_PRIORITY_REQUEST_SHARE=10" &
wait
for name in req7ms req2ms req2ms-b eager; do
  [ -f $OUT/$name/log.txt ] || continue
  echo "== $name"; grep -iE "goal|p99 ÷|trainer ÷|PASS|FAIL|^\| [0-9-]|error" $OUT/$name/log.txt | tail -n 24
  grep -h "priority gate, device" $OUT/$name/logs/*.log 2>/dev/null | sed 's/^.*priority gate, device 0: //' | head -6
done
