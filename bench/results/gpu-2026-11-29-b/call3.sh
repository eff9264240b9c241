#!/usr/bin/env bash
# Device call 3 of 2026-11-29-b (one H200): issue 41's best-effort trainer beside an idle high
# tenant under MPS, in alternation (--idle-rounds: alone, beside an idle high under gpuslice, beside
# an idle process un-managed, alone under gpuslice, round after round), so the GPU's warm-up does not
# fall on one side.
set -uo pipefail
export PYTHONUNBUFFERED=1
R=$OUT; W=/tmp/c3; mkdir -p "$W"
prefix=(); [ -d .devdeps ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.devdeps")
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGPUSLICE_BUILD_NODE=OFF -DGPUSLICE_BUILD_TESTS=OFF \
  -DGPUSLICE_BUILD_BENCH=OFF "${prefix[@]}" > "$R/build.log" 2>&1
cmake --build build -j"$(nproc)" --target gpuslice_preload gpuslice_cli >> "$R/build.log" 2>&1 ||
  { tail -30 "$R/build.log"; exit 1; }
timeout 370 python3 bench/gpu/priority_bench.py --lib build/lib/libgpuslice.so --cli build/bin/gpuslice \
  --alone-seconds 6 --idle-rounds 3 --idle-only --mps --out "$W/idle" > "$R/idle.txt" 2>&1
echo "idle rounds mps: exit $?"
tar czf "$R/idle.tgz" -C "$W" idle 2>/dev/null
grep -E "round|alone|idle" "$R/idle.txt" | tail -n 30
