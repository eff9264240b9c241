#!/usr/bin/env bash
# Device call 3 of 2026-11-29-c (one H200): issue 43, why four threads on streams get less than their
# limit (calls 1-2: 20-22% GPU time under 30%): the same four threads on one stream (threads4), one
# thread on the four streams (streams4seq) and streams4 again, two alternations; and the decode loop
# with an 8 s warm-up (its first unlimited phase ran at 40-60% of its later rate).
set -uo pipefail
R=$OUT; W=/tmp/c3; mkdir -p "$W"
t0=$SECONDS
tests/gpu/build_release.sh "$R/build.log" gpuslice_preload gpuslice_cli || exit 1
echo "build ok at $((SECONDS - t0)) s"
SKIP_BUILD=1 ALTERNATIONS=2 SHAPES=threads4,streams4seq,streams4,decode TWO_PROCESS_LIMITS="" OUT=$W timeout 330 \
  bench/gpu/compute_accuracy_round.sh > "$R/round.txt" 2>&1
echo "compute_accuracy_round: exit $? at $((SECONDS - t0)) s"
cp "$W/compute-accuracy/table.md" "$R/table.md" 2>/dev/null
tar czf "$R/c3.tgz" -C "$W" compute-accuracy 2>/dev/null
sed -n '/== per shape/,$p' "$R/round.txt" | head -30
