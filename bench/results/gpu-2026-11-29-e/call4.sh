#!/usr/bin/env bash
# Device call 4 of 2026-11-29-e (two H200s of one host): issue 43 in one call, every shape at
# 20/30/50/80%, three alternations, 3 s phases, on the final tree: the flat-out estimate of calls 2-3
# (the second lowest busy clock, none in the first second after waking) and two processes counted
# summed (calls 1-3 counted the measured one of the two). GPU 0 runs graph, mix, decode, threads4,
# streams4; GPU 1 runs graph2p, long40, compile, cluster and two processes started under 40% and 70%,
# twice each (cores 12-15: the runs' pinned cores do not overlap).
set -uo pipefail
R=$OUT; mkdir -p build/gpu
t0=$SECONDS
tests/gpu/build_release.sh "$R/build.log" gpuslice_preload gpuslice_cli || exit 1
nvcc -O2 -arch=sm_90 -shared -Xcompiler -fPIC -o build/gpu/libcluster_spin.so bench/gpu/cluster_spin.cu \
  >> "$R/build.log" 2>&1 || { tail -20 "$R/build.log"; exit 1; }
echo "build ok at $((SECONDS - t0)) s"
nvidia-smi -L > "$R/gpus.txt"
left=$((575 - (SECONDS - t0)))
CUDA_VISIBLE_DEVICES=0 SKIP_BUILD=1 SHAPES=graph,mix,decode,threads4,streams4 TWO_PROCESS_LIMITS="" OUT=/tmp/g0 \
  timeout "$left" bench/gpu/compute_accuracy_round.sh > "$R/round-gpu0.txt" 2>&1 &
p0=$!
CUDA_VISIBLE_DEVICES=1 SKIP_BUILD=1 SHAPES=graph2p,long40,compile,cluster TWO_PROCESS_LIMITS="40 70 40 70" \
  ACCURACY_ARGS="--cpu-offset 8" OUT=/tmp/g1 \
  timeout "$left" bench/gpu/compute_accuracy_round.sh > "$R/round-gpu1.txt" 2>&1 &
p1=$!
wait $p0; echo "gpu0 round: exit $? at $((SECONDS - t0)) s"
wait $p1; echo "gpu1 round: exit $? at $((SECONDS - t0)) s"
tar czf "$R/g0.tgz" -C /tmp/g0 compute-accuracy 2>/dev/null
tar czf "$R/g1.tgz" -C /tmp/g1 compute-accuracy 2>/dev/null
for g in 0 1; do sed -n '/== per shape/,/^worst/p' "$R/round-gpu$g.txt"; done
