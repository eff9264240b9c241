#!/usr/bin/env bash
# Device call 4 (2026-11-28, second session; a 2-GPU machine): the eager (host-bound) GPT-2 server at
# 60% load beside the trainer, paired, after the busy probe stopped counting the launch call's host
# time in pairs begun on an idle stream (DeviceShare measures a server's share with the same probe:
# 309-600 permille before, while NVML saw its device 6-20% busy). Un-managed, the defaults, and light
# servers not holding (GPUSLICE_PRIORITY_LIGHT_SHARE=50), on both GPUs (two replicates).
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=$OUT/build tests/gpu/run.sh none > /dev/null 2>&1 || { echo build failed; tail -30 $OUT/build/build.log; exit 1; }
cat $OUT/build/env.txt
bench=(python3 bench/gpu/priority_bench.py --lib build/lib/libgpuslice.so --cli build/bin/gpuslice --seconds ${SECONDS_PER:-10})
prio() {  # name gpu args...
  local name=$1 gpu=$2; shift 2; mkdir -p $OUT/$name
  CUDA_VISIBLE_DEVICES=$gpu "${bench[@]}" --out $OUT/$name "$@" > $OUT/$name/log.txt 2>&1; echo "$name: exit $?"
}
prio eager-a 0 --paired --loads 60 --server-eager --cpu-offset 0 --variant "light;trainer:GPUSLICE_PRIORITY_LIGHT_SHARE=50" &
prio eager-b 1 --paired --loads 60 --server-eager --cpu-offset 16 --variant "light;trainer:GPUSLICE_PRIORITY_LIGHT_SHARE=50" &
wait
mkdir -p $OUT/keep
for name in eager-a eager-b; do
  [ -f $OUT/$name/log.txt ] || continue
  echo "== $name"; grep -iE "goal|p99 ÷|trainer ÷|PASS|FAIL|^\| [0-9-]|error|alone" $OUT/$name/log.txt | tail -n 30
  cp $OUT/$name/log.txt $OUT/keep/priority-$name.txt
  grep -h "priority gate, device" $OUT/$name/logs/*.log > $OUT/keep/priority-$name-exit-lines.txt 2>/dev/null
  head -8 $OUT/keep/priority-$name-exit-lines.txt
done
rm -rf $OUT/build $OUT/eager-a $OUT/eager-b
