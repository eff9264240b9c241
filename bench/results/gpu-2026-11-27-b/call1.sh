#!/usr/bin/env bash
# Device call 1 (2026-11-27 evening): launch A/B with a compute limit (this tree with the busy probe,
# this tree with GPUSLICE_COMPUTE_BUSY=launches, the library before this round), then the compute
# limit's accuracy for the shapes not run before: four threads on four streams, clusters, two
# processes of one container.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=$OUT/build tests/gpu/run.sh none > /dev/null 2>&1 || { echo build failed; tail -30 $OUT/build/build.log; exit 1; }
cat $OUT/build/env.txt
cmake -S .old -B build-old -DCMAKE_BUILD_TYPE=Release -DGPUSLICE_BUILD_NODE=OFF -DGPUSLICE_BUILD_TESTS=OFF \
  -DGPUSLICE_BUILD_BENCH=OFF -DCMAKE_PREFIX_PATH=$PWD/.devdeps > $OUT/build-old.log 2>&1 &&
  cmake --build build-old -j16 --target gpuslice_preload_ab >> $OUT/build-old.log 2>&1 || { tail -20 $OUT/build-old.log; exit 1; }
n=${AB_ROUNDS:-200}
for rep in 1 2; do
  for side in new new-launches old; do
    lib=$PWD/build/lib/libgpuslice-ab.so; busy=events
    [ $side = old ] && lib=$PWD/build-old/lib/libgpuslice-ab.so
    [ $side = new-launches ] && busy=launches
    echo "## $side rep $rep: memory quota + compute limit 90"
    taskset -c 4 env LD_PRELOAD=$lib GPUSLICE_MEMORY_LIMIT=60Gi GPUSLICE_COMPUTE_LIMIT=90 GPUSLICE_COMPUTE_BUSY=$busy \
      GPUSLICE_LOG_LEVEL=info GPUSLICE_SHARED_DIR=$(mktemp -d) build/gpu/launch_ab $n
  done
done > $OUT/launch_ab_new_old.txt 2>&1
grep -E "^## |^launch|timed" $OUT/launch_ab_new_old.txt | head -60
python3 bench/gpu/compute_accuracy.py --lib build/lib/libgpuslice.so --out $OUT/accuracy --seconds 3 --warmup 8 \
  --schedule 100,20,100,30,100,50,100,80,100 --workloads ${ACC_WORKLOADS:-streams4,cluster,matmul2p} > $OUT/accuracy.txt 2>&1
grep -E "^\| |phases pass|timed|Error|error" $OUT/accuracy.txt | head -40
