#!/usr/bin/env bash
# Device call 2 of 2026-11-29-e (two H200s of one host). GPU 0: tests/gpu/reclaim_writes.sh (the
# memset, 2D/3D, peer, batched-copy and stream-memory-operation hooks on the real driver, issue 47),
# then the launch-cost A/B against 1f7f5f4 with a compute limit of 50 (issue 43). GPU 1 (cores
# 12-15): two processes started under 40% and 70%, three times each, with the first second after
# waking not taken into the flat-out estimate; streams4 again (call 1: +2.3 at 20%).
set -uo pipefail
R=$OUT; mkdir -p build/gpu
t0=$SECONDS
tests/gpu/build_release.sh "$R/build.log" gpuslice_preload gpuslice_cli gpuslice_preload_ab || exit 1
echo "build ok at $((SECONDS - t0)) s"
CUDA_VISIBLE_DEVICES=1 SKIP_BUILD=1 SHAPES=streams4 TWO_PROCESS_LIMITS="40 70 40 70 40 70" \
  ACCURACY_ARGS="--cpu-offset 8" OUT=/tmp/g1 timeout 400 bench/gpu/compute_accuracy_round.sh > "$R/round-gpu1.txt" 2>&1 &
p1=$!
(
  export CUDA_VISIBLE_DEVICES=0
  OUT=/tmp/g0 timeout 200 tests/gpu/reclaim_writes.sh > "$R/reclaim_writes.txt" 2>&1
  echo "reclaim_writes: exit $? at $((SECONDS - t0)) s"
  AB_COMPUTE_LIMIT=50 AB_CPU=2 OUT=/tmp/g0 timeout 240 bench/gpu/launch_ab_trees.sh .abold 3 > "$R/launch_ab.txt" 2>&1
  echo "launch_ab_trees: exit $? at $((SECONDS - t0)) s"
) > "$R/gpu0.txt" 2>&1
wait $p1; echo "gpu1 round: exit $? at $((SECONDS - t0)) s"
cat "$R/gpu0.txt"
tar czf "$R/g0.tgz" -C /tmp/g0 . 2>/dev/null
tar czf "$R/g1.tgz" -C /tmp/g1 compute-accuracy 2>/dev/null
tail -n 30 "$R/reclaim_writes.txt"
tail -n 12 "$R/launch_ab.txt"
sed -n '/== per shape/,/^worst/p' "$R/round-gpu1.txt"
