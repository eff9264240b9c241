#!/usr/bin/env bash
# Device call 4 of 2026-11-29-b (one H200): issue 43, the compute limit by GPU time with the
# clock-corrected charge (bench/gpu/compute_accuracy_round.sh: graph, graph2p, mix at 20/30/50/80%,
# 3 s phases, three alternations; graph2p started under 40% and 70%).
set -uo pipefail
R=$OUT; W=/tmp/c4; mkdir -p "$W"
OUT=$W timeout 400 bench/gpu/compute_accuracy_round.sh > "$R/round.txt" 2>&1
echo "compute_accuracy_round: exit $?"
tar czf "$R/c4.tgz" -C "$W" . 2>/dev/null
cp "$W/compute-accuracy/table.md" "$R/table.md" 2>/dev/null
tail -n 40 "$R/round.txt"
