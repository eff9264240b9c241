#!/usr/bin/env bash
# Device call 1 of 2026-11-29-c (one H200): issue 43, the compute limit by GPU time with the
# clock-corrected charge and the estimated reference for containers limited from their start:
# decode, four threads on streams and 40 ms kernels at 20/30/50/80% (3 s phases, three
# alternations), two processes of one container started under 40% and 70%; then the launch and
# allocation cost against the tree the issues were filed on (1f7f5f4, carried in .abold/).
set -uo pipefail
R=$OUT; W=/tmp/c1; mkdir -p "$W"
t0=$SECONDS
tests/gpu/build_release.sh "$R/build.log" gpuslice_preload gpuslice_cli || exit 1
echo "build ok at $((SECONDS - t0)) s"
SKIP_BUILD=1 SHAPES=decode,streams4,long40 OUT=$W timeout 380 bench/gpu/compute_accuracy_round.sh > "$R/round.txt" 2>&1
echo "compute_accuracy_round: exit $? at $((SECONDS - t0)) s"
cp "$W/compute-accuracy/table.md" "$R/table.md" 2>/dev/null
tar czf "$R/c1.tgz" -C "$W" compute-accuracy 2>/dev/null
left=$((570 - (SECONDS - t0)))
OUT=$W timeout "$left" bench/gpu/launch_ab_trees.sh .abold 3 > "$R/ab.txt" 2>&1
echo "launch_ab_trees: exit $? at $((SECONDS - t0)) s"
tar czf "$R/ab.tgz" -C "$W" launch-ab-trees 2>/dev/null
sed -n '/== per shape/,$p' "$R/round.txt" | head -40; tail -n 12 "$R/ab.txt"
