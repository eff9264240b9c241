#!/usr/bin/env bash
# Device call 2 (2026-11-27 evening, a 4-GPU machine): priority sharing's goals side by side
# (GPU 0: 7 ms graph requests at 30% and 60%, paired; GPU 1: 2 ms requests at 30%, paired; GPU 2:
# the eager server at 60%, five configurations) while GPU 3 runs the compute limit's accuracy for
# the shapes that failed or were not run (ACC_WORKLOADS), then the launch A/B.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=$OUT/build tests/gpu/run.sh none > /dev/null 2>&1 || { echo build failed; tail -30 $OUT/build/build.log; exit 1; }
cat $OUT/build/env.txt
cmake -S .old -B build-old -DCMAKE_BUILD_TYPE=Release -DGPUSLICE_BUILD_NODE=OFF -DGPUSLICE_BUILD_TESTS=OFF \
  -DGPUSLICE_BUILD_BENCH=OFF -DCMAKE_PREFIX_PATH=$PWD/.devdeps > $OUT/build-old.log 2>&1 &&
  cmake --build build-old -j32 --target gpuslice_preload_ab >> $OUT/build-old.log 2>&1 || echo "old build failed"
bench=(python3 bench/gpu/priority_bench.py --lib build/lib/libgpuslice.so --cli build/bin/gpuslice --seconds ${SECONDS_PER:-12})
prio() {  # name gpu args...
  local name=$1 gpu=$2; shift 2; mkdir -p $OUT/$name
  CUDA_VISIBLE_DEVICES=$gpu "${bench[@]}" --out $OUT/$name "$@" > $OUT/$name/log.txt 2>&1; echo "$name: exit $?"
}
if [ -z "${SKIP_PRIO:-}" ]; then
  prio req7ms 0 --paired --loads 30,60 &
  prio req2ms 1 --paired --loads 30 --server-batch 4 --server-tokens 256 --cpu-offset 10 &
  prio eager 2 --loads 60 --server-eager --cpu-offset 20 &
fi
{
  CUDA_VISIBLE_DEVICES=3 python3 bench/gpu/compute_accuracy.py --lib build/lib/libgpuslice.so --out $OUT/accuracy \
    --seconds ${ACC_SECONDS:-3} --warmup 8 --cpus 40-43 --schedule 100,20,100,30,100,50,100,80,100 \
    --workloads ${ACC_WORKLOADS:-graph,streams4,compile} > $OUT/accuracy.txt 2>&1
  if [ -n "${AB:-}" ]; then
    n=200
    for rep in 1 2; do for side in new old; do
      lib=$PWD/build/lib/libgpuslice-ab.so; [ $side = old ] && lib=$PWD/build-old/lib/libgpuslice-ab.so
      echo "## $side rep $rep: memory quota + compute limit 90"
      CUDA_VISIBLE_DEVICES=3 taskset -c 44 env LD_PRELOAD=$lib GPUSLICE_MEMORY_LIMIT=60Gi GPUSLICE_COMPUTE_LIMIT=90 \
        GPUSLICE_LOG_LEVEL=info GPUSLICE_SHARED_DIR=$(mktemp -d) build/gpu/launch_ab $n
    done; done > $OUT/launch_ab_new_old.txt 2>&1
  fi
} &
wait
echo "== accuracy"; grep -E "^\| |phases pass|timed|rror" $OUT/accuracy.txt | head -40
[ -f $OUT/launch_ab_new_old.txt ] && { echo "== launch A/B"; grep -E "^## |^launch|timed" $OUT/launch_ab_new_old.txt; }
for name in req7ms req2ms eager; do
  [ -f $OUT/$name/log.txt ] || continue
  echo "== $name"; grep -iE "goal|p99 ÷|trainer ÷|PASS|FAIL|^\| [0-9-]" $OUT/$name/log.txt | tail -n 22
done
