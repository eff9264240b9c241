#!/usr/bin/env bash
# Device call 4 of 2026-11-29-c (one H200): issue 43 after the fix for a limit lifted between windows
# (the queue of the unlimited stretch was charged to the next limit: calls 1-3 showed 0.4-1.1 s
# stalls after a live change, deepest with four streams): streams4 and cluster at 20/30/50/80%,
# 3 s phases, two alternations.
set -uo pipefail
R=$OUT; W=/tmp/c4; mkdir -p "$W" build/gpu
t0=$SECONDS
tests/gpu/build_release.sh "$R/build.log" gpuslice_preload gpuslice_cli || exit 1
nvcc -O2 -arch=sm_90 -shared -Xcompiler -fPIC -o build/gpu/libcluster_spin.so bench/gpu/cluster_spin.cu \
  >> "$R/build.log" 2>&1 || { tail -20 "$R/build.log"; exit 1; }
echo "build ok at $((SECONDS - t0)) s"
SKIP_BUILD=1 ALTERNATIONS=2 SHAPES=streams4,cluster TWO_PROCESS_LIMITS="" OUT=$W timeout 200 \
  bench/gpu/compute_accuracy_round.sh > "$R/round.txt" 2>&1
echo "compute_accuracy_round: exit $? at $((SECONDS - t0)) s"
cp "$W/compute-accuracy/table.md" "$R/table.md" 2>/dev/null
tar czf "$R/c4.tgz" -C "$W" compute-accuracy 2>/dev/null
sed -n '/== per shape/,$p' "$R/round.txt" | head -16
