#!/usr/bin/env bash
# Device call 2 of 2026-11-29-c (one H200): issue 43, the shapes call 1 did not cover or found off:
# four threads on streams again (the busy probe now counts the union of its timed launches, call 1
# held it at 8-10% GPU time under 20%), torch.compile, thread-block clusters and the decode loop
# again, at 20/30/50/80% (3 s phases, three alternations).
set -uo pipefail
R=$OUT; W=/tmp/c2; mkdir -p "$W" build/gpu
t0=$SECONDS
tests/gpu/build_release.sh "$R/build.log" gpuslice_preload gpuslice_cli || exit 1
nvcc -O2 -arch=sm_90 -shared -Xcompiler -fPIC -o build/gpu/libcluster_spin.so bench/gpu/cluster_spin.cu \
  >> "$R/build.log" 2>&1 || { tail -20 "$R/build.log"; exit 1; }
echo "build ok at $((SECONDS - t0)) s"
SKIP_BUILD=1 SHAPES=streams4,compile,cluster,decode TWO_PROCESS_LIMITS="" OUT=$W timeout 520 \
  bench/gpu/compute_accuracy_round.sh > "$R/round.txt" 2>&1
echo "compute_accuracy_round: exit $? at $((SECONDS - t0)) s"
cp "$W/compute-accuracy/table.md" "$R/table.md" 2>/dev/null
tar czf "$R/c2.tgz" -C "$W" compute-accuracy 2>/dev/null
sed -n '/== per shape/,$p' "$R/round.txt" | head -40
