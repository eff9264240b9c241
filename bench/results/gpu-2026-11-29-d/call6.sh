#!/usr/bin/env bash
# Device call 6 of 2026-11-29-d (one H200): issue 43, two processes of one container started under
# 40% and 70%, twice each, on the tree with the new flat-out reference (the first 1 s window is the
# pair's first second under the limit; no flat-out clock yet: the estimate from the duty).
set -uo pipefail
R=$OUT; W=/tmp/c6; mkdir -p "$W"
t0=$SECONDS
tests/gpu/build_release.sh "$R/build.log" gpuslice_preload gpuslice_cli || exit 1
echo "build ok at $((SECONDS - t0)) s"
SKIP_BUILD=1 SHAPES=none TWO_PROCESS_LIMITS="40 70 40 70" OUT=$W timeout 190 \
  bench/gpu/compute_accuracy_round.sh > "$R/round.txt" 2>&1
echo "compute_accuracy_round: exit $? at $((SECONDS - t0)) s"
tar czf "$R/c6.tgz" -C "$W" compute-accuracy 2>/dev/null
sed -n '/== per shape/,$p' "$R/round.txt" | head -24
