#!/usr/bin/env bash
# Device call 3 (2026-11-28, a 4-GPU machine): where a 2 ms request's extra time comes from, and the
# eager server's trainer. GPUs 0 and 3: 2 ms requests at 30%, the defaults against the trainer
# re-reading the server's record every 50 us instead of 250 us (GPUSLICE_PRIORITY_REFRESH), on two
# CPU sets; GPU 1: 7 ms requests at 30%, the defaults against a 4 ms in-flight bound; GPU 2: the eager
# server at 60%, un-managed, the defaults, light servers not holding (LIGHT_SHARE=50), and that with
# an 8 ms bound. priority_bench.json (NVML's SM clock per 100 ms) is kept for the 2 ms runs.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=$OUT/build tests/gpu/run.sh none > /dev/null 2>&1 || { echo build failed; tail -30 $OUT/build/build.log; exit 1; }
cat $OUT/build/env.txt
bench=(python3 bench/gpu/priority_bench.py --lib build/lib/libgpuslice.so --cli build/bin/gpuslice --seconds ${SECONDS_PER:-12})
prio() {  # name gpu args...
  local name=$1 gpu=$2; shift 2; mkdir -p $OUT/$name
  CUDA_VISIBLE_DEVICES=$gpu "${bench[@]}" --out $OUT/$name "$@" > $OUT/$name/log.txt 2>&1; echo "$name: exit $?"
}
r50="refresh50;trainer:GPUSLICE_PRIORITY_REFRESH=50us"
two=(--paired --only-priorities --loads 30 --server-batch 4 --server-tokens 256)
prio req2ms 0 "${two[@]}" --variant "$r50" &
prio req7ms 1 --paired --only-priorities --loads 30 --cpu-offset 10 --variant "if4;trainer:GPUSLICE_PRIORITY_IN_FLIGHT=4ms" &
prio eager 2 --paired --loads 60 --server-eager --cpu-offset 20 --variant "light;trainer:GPUSLICE_PRIORITY_LIGHT_SHARE=50" \
  --variant "light8;trainer:GPUSLICE_PRIORITY_LIGHT_SHARE=50,GPUSLICE_PRIORITY_IN_FLIGHT=8ms" &
prio req2ms-b 3 "${two[@]}" --cpu-offset 40 --variant "$r50" &
wait
for name in req2ms req2ms-b req7ms eager; do
  [ -f $OUT/$name/log.txt ] || continue
  echo "== $name"; grep -iE "goal|p99 ÷|trainer ÷|PASS|FAIL|^\| [0-9-]|error" $OUT/$name/log.txt | tail -n 24
done
