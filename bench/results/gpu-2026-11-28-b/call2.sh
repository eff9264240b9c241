#!/usr/bin/env bash
# Device call 2 (2026-11-28, second session; a 2-GPU machine): the busy probe with the launch call's
# host time taken off pairs begun on an idle stream. GPU 0: the decode loop under 20/30/50/80% in
# short phases between unlimited ones, pooled per limit; then compile and mix (tiny kernels behind
# queued work: nothing may be taken off there) with their kernels' device timestamps. GPU 1: the
# launch A/B against the library before the GPU-time work (commit 5552c9a, from .old/), then graph
# and streams4 with device timestamps.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=$OUT/build tests/gpu/run.sh none > /dev/null 2>&1 || { echo build failed; tail -30 $OUT/build/build.log; exit 1; }
cat $OUT/build/env.txt
cmake -S .old -B build-old -DCMAKE_BUILD_TYPE=Release -DGPUSLICE_BUILD_NODE=OFF -DGPUSLICE_BUILD_TESTS=OFF \
  -DGPUSLICE_BUILD_BENCH=OFF -DCMAKE_PREFIX_PATH=$PWD/.devdeps > $OUT/build-old.log 2>&1 &&
  cmake --build build-old -j16 --target gpuslice_preload_ab >> $OUT/build-old.log 2>&1 || echo "old build failed"
acc() {  # name gpu cpus workloads [schedule] [seconds] [extra]
  CUDA_VISIBLE_DEVICES=$2 python3 bench/gpu/compute_accuracy.py --lib build/lib/libgpuslice.so --out $OUT/acc-$1 \
    --seconds ${6:-3} --warmup 8 --cpus $3 --schedule ${5:-100,20,100,30,100,50,100,80,100} \
    --workloads $4 ${7:-} > $OUT/acc-$1.txt 2>&1; echo "acc-$1: exit $?"
}
kt="--kernel-timeline build/gpu/libkernel_timeline.so"
{ acc decode 0 2 decode 100,30,100,20,100,50,100,80,100,30,100,20,100,50,100 2
  acc g 0 2-5 compile,mix "" 3 "$kt"; } &
{ n=200
  for rep in 1 2 3; do
    order="new old"; [ $((rep % 2)) = 0 ] && order="old new"
    for side in $order; do
      lib=$PWD/build/lib/libgpuslice-ab.so; [ $side = old ] && lib=$PWD/build-old/lib/libgpuslice-ab.so
      echo "## $side rep $rep: memory quota + compute limit 90"
      CUDA_VISIBLE_DEVICES=1 taskset -c 18 env LD_PRELOAD=$lib GPUSLICE_MEMORY_LIMIT=60Gi GPUSLICE_COMPUTE_LIMIT=90 \
        GPUSLICE_LOG_LEVEL=info GPUSLICE_SHARED_DIR=$(mktemp -d) build/gpu/launch_ab $n
    done
  done > $OUT/launch_ab.txt 2>&1
  acc s 1 18-21 graph,streams4 "" 3 "$kt"; } &
wait
for x in decode g s; do
  echo "== accuracy $x"; grep -E "^\| |phases pass|timed|rror|^[a-z0-9]+:$|pooled|Traceback" $OUT/acc-$x.txt | head -45
done
echo "== launch A/B"; grep -E "^## |^launch|timed|median|ABBA|interleav" $OUT/launch_ab.txt | head -60
mkdir -p $OUT/keep
for x in decode g s; do cp $OUT/acc-$x.txt $OUT/keep/; gzip -c $OUT/acc-$x/compute_accuracy.json > $OUT/keep/acc-$x.json.gz; done
cp $OUT/launch_ab.txt $OUT/keep/
rm -rf $OUT/build $OUT/acc-decode $OUT/acc-g $OUT/acc-s $OUT/acc-*.txt $OUT/launch_ab.txt $OUT/build-old.log
