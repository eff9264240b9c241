#!/usr/bin/env bash
# Device call 1 of 2026-11-29-d (one H200): issue 47's first GPU run (tests/gpu/reclaim.sh: a
# best-effort trainer borrowing 24 GiB, a high server growing to its guarantee, reclaim/restore
# timed, the loss curve compared bit for bit); then issue 43's power-cap guard: two processes of one
# container started under 40% and 70% (no flat-out second: the estimated reference only if NVML
# reports the SW power cap), with NVML's clock-event reasons sampled every 100 ms beside them.
set -uo pipefail
R=$OUT; W=/tmp/c1; mkdir -p "$W"
t0=$SECONDS
tests/gpu/build_release.sh "$R/build.log" gpuslice_preload gpuslice_cli || exit 1
echo "build ok at $((SECONDS - t0)) s"
OUT=$R timeout 300 tests/gpu/reclaim.sh --train-seconds 40 --hold-s 3 --seconds 45 > "$R/reclaim.out" 2>&1
echo "reclaim: exit $? at $((SECONDS - t0)) s"
tail -n 30 "$R/reclaim.out"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks_event_reasons.active,clocks_event_reasons.sw_power_cap,clocks_event_reasons.applications_clocks_setting,utilization.gpu,power.draw \
  --format=csv -lms 100 > "$R/nvml-reasons.csv" 2>&1 &
smi=$!
left=$((560 - (SECONDS - t0)))
SKIP_BUILD=1 SHAPES=none TWO_PROCESS_LIMITS="40 70" OUT=$W timeout "$left" \
  bench/gpu/compute_accuracy_round.sh > "$R/round.txt" 2>&1
echo "compute_accuracy_round: exit $? at $((SECONDS - t0)) s"
kill $smi 2>/dev/null
cp "$W/compute-accuracy/table.md" "$R/table.md" 2>/dev/null
tar czf "$R/c1.tgz" -C "$W" compute-accuracy 2>/dev/null
sed -n '/== per shape/,$p' "$R/round.txt" | head -24
awk -F', ' 'NR>1 {n[$4]++} END {for (k in n) print "sw_power_cap", k, n[k]}' "$R/nvml-reasons.csv"
