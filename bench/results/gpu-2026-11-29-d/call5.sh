#!/usr/bin/env bash
# Device call 5 of 2026-11-29-d (one H200): issue 47 with the borrower held until the asker has its
# allocation (call 4: the trainer resumed about 40 ms before the big block returned), 7 ms requests;
# then issue 43 after the flat-out reference change (a clock counts once six flat-out samples
# confirm it; the mean of the last second): streams4, threads4, graph, graph2p, mix at 20/30/50/80%,
# two alternations.
set -uo pipefail
R=$OUT
t0=$SECONDS
tests/gpu/build_release.sh "$R/build.log" gpuslice_preload gpuslice_cli || exit 1
echo "build ok at $((SECONDS - t0)) s"
W=/tmp/c5; mkdir -p "$W"
timeout 150 python3 tests/gpu/reclaim.py --lib build/lib/libgpuslice.so --cli build/bin/gpuslice --out "$W/reclaim-8192" \
  --train-seconds 25 --hold-s 3 --seconds 45 --matmul 8192 > "$W/reclaim-8192.txt" 2>&1
echo "reclaim matmul 8192: exit $? at $((SECONDS - t0)) s"
tar czf "$R/reclaim-8192.tgz" -C "$W" reclaim-8192 reclaim-8192.txt
grep -v "^step=" "$W/reclaim-8192.txt" | tail -n 14
left=$((575 - (SECONDS - t0)))
SKIP_BUILD=1 ALTERNATIONS=2 SHAPES=streams4,threads4,graph,graph2p,mix TWO_PROCESS_LIMITS="" OUT=$W timeout "$left" \
  bench/gpu/compute_accuracy_round.sh > "$R/round.txt" 2>&1
echo "compute_accuracy_round: exit $? at $((SECONDS - t0)) s"
cp "$W/compute-accuracy/table.md" "$R/table.md" 2>/dev/null
tar czf "$R/c5.tgz" -C "$W" compute-accuracy 2>/dev/null
sed -n '/== per shape/,$p' "$R/round.txt" | head -40
