#!/usr/bin/env bash
# Device call 3 of 2026-11-29-e (two H200s of one host). Call 2's two-process runs shared the host
# with tests/gpu/reclaim_writes.sh, whose unpinned processes took the pinned cores (two runs had
# most windows ended by a pause, 0.83 and 0.48 under 70% and 40%), and its A/B lacked LICENSE and
# packaging/ in .abold. Here every build comes first. GPU 1 (cores 12-15): two processes started
# under 40% and 70%, three times each. GPU 0 (core 2): the launch-cost A/B against 1f7f5f4 with a
# compute limit of 50.
set -uo pipefail
R=$OUT; mkdir -p build/gpu
t0=$SECONDS
tests/gpu/build_release.sh "$R/build.log" gpuslice_preload gpuslice_cli gpuslice_preload_ab || exit 1
tests/gpu/build_release.sh -S .abold -B /tmp/ab-old-build "$R/build.log" gpuslice_preload_ab || exit 1
nvcc -O2 -arch=sm_90 -o build/gpu/launch_ab bench/gpu/launch_ab.cu -ldl >> "$R/build.log" 2>&1 || exit 1
echo "builds ok at $((SECONDS - t0)) s"
CUDA_VISIBLE_DEVICES=1 SKIP_BUILD=1 SHAPES=none TWO_PROCESS_LIMITS="40 70 40 70 40 70" \
  ACCURACY_ARGS="--cpu-offset 8" OUT=/tmp/g1 timeout 300 bench/gpu/compute_accuracy_round.sh > "$R/round-gpu1.txt" 2>&1 &
p1=$!
CUDA_VISIBLE_DEVICES=0 AB_COMPUTE_LIMIT=50 AB_CPU=2 OUT=/tmp/g0 timeout 280 \
  bench/gpu/launch_ab_trees.sh .abold 3 > "$R/launch_ab.txt" 2>&1
echo "launch_ab_trees: exit $? at $((SECONDS - t0)) s"
wait $p1; echo "gpu1 round: exit $? at $((SECONDS - t0)) s"
tar czf "$R/g0.tgz" -C /tmp/g0 . 2>/dev/null
tar czf "$R/g1.tgz" -C /tmp/g1 compute-accuracy 2>/dev/null
tail -n 12 "$R/launch_ab.txt"
grep -E "^graph2p-" "$R/round-gpu1.txt"
sed -n '/== per shape/,/^worst/p' "$R/round-gpu1.txt"
