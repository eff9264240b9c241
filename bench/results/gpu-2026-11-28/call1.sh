#!/usr/bin/env bash
# Device call 1 (2026-11-28, a 4-GPU machine): the compute limit's GPU-time check in one call (every
# shape of the issue at 20/30/50/80 on GPUs 0-2, the decode loop included) and the launch A/B against
# the library before the GPU-time work (commit 5552c9a, built here from .old/); then, on GPU 3, 2 ms
# requests at 30% with the bound sized by the server's requests against the whole bound (paired).
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=$OUT/build tests/gpu/run.sh none > /dev/null 2>&1 || { echo build failed; tail -30 $OUT/build/build.log; exit 1; }
cat $OUT/build/env.txt
cmake -S .old -B build-old -DCMAKE_BUILD_TYPE=Release -DGPUSLICE_BUILD_NODE=OFF -DGPUSLICE_BUILD_TESTS=OFF \
  -DGPUSLICE_BUILD_BENCH=OFF -DCMAKE_PREFIX_PATH=$PWD/.devdeps > $OUT/build-old.log 2>&1 &&
  cmake --build build-old -j32 --target gpuslice_preload_ab >> $OUT/build-old.log 2>&1 || echo "old build failed"
acc() {  # name gpu cpus workloads
  CUDA_VISIBLE_DEVICES=$2 python3 bench/gpu/compute_accuracy.py --lib build/lib/libgpuslice.so --out $OUT/acc-$1 \
    --seconds ${ACC_SECONDS:-3} --warmup 8 --cpus $3 --schedule 100,20,100,30,100,50,100,80,100 \
    --workloads $4 > $OUT/acc-$1.txt 2>&1; echo "acc-$1: exit $?"
}
acc a 0 2-5 decode,graph,mix,long40 &
acc b 1 18-21 streams4,compile &
acc c 2 34-37 cluster,matmul2p &
{
  n=200
  for rep in 1 2 3; do
    order="new old"; [ $((rep % 2)) = 0 ] && order="old new"
    for side in $order; do
      lib=$PWD/build/lib/libgpuslice-ab.so; [ $side = old ] && lib=$PWD/build-old/lib/libgpuslice-ab.so
      echo "## $side rep $rep: memory quota + compute limit 90"
      CUDA_VISIBLE_DEVICES=3 taskset -c 50 env LD_PRELOAD=$lib GPUSLICE_MEMORY_LIMIT=60Gi GPUSLICE_COMPUTE_LIMIT=90 \
        GPUSLICE_LOG_LEVEL=info GPUSLICE_SHARED_DIR=$(mktemp -d) build/gpu/launch_ab $n
    done
  done > $OUT/launch_ab.txt 2>&1
  mkdir -p $OUT/req2ms
  CUDA_VISIBLE_DEVICES=3 python3 bench/gpu/priority_bench.py --lib build/lib/libgpuslice.so --cli build/bin/gpuslice \
    --seconds ${SECONDS_PER:-12} --out $OUT/req2ms --paired --only-priorities --loads 30 --server-batch 4 \
    --server-tokens 256 --cpu-offset 50 --variant "whole;server:;trainer:GPUSLICE_PRIORITY_REQUEST_SHARE=0" \
    > $OUT/req2ms/log.txt 2>&1; echo "req2ms: exit $?"
} &
wait
for x in a b c; do
  echo "== accuracy $x"; grep -E "^\| |phases pass|timed|rror|^[a-z0-9]+:$" $OUT/acc-$x.txt | head -40
done
echo "== launch A/B"; grep -E "^## |^launch|timed|median|ABBA|interleav" $OUT/launch_ab.txt | head -60
echo "== req2ms"; grep -iE "goal|p99 ÷|trainer ÷|PASS|FAIL|^\| [0-9-]|busy periods" $OUT/req2ms/log.txt | tail -n 30
grep -h "priority gate, device" $OUT/req2ms/logs/*.log 2>/dev/null | head -8
