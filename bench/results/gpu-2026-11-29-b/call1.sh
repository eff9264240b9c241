#!/usr/bin/env bash
# Device call 1 of 2026-11-29-b (one H200): issue 42's ioctl question with the fixed decoder
# (bench/gpu/rm_alloc_round.sh), issue 47's host-backed VMM probe (tests/gpu/vmm_host.sh), and
# issue 41's 7 ms requests at 60% load under MPS with the new default 1 ms in-flight bound.
set -uo pipefail
R=$OUT; W=/tmp/c1; mkdir -p "$W"
t0=$SECONDS
prefix=(); [ -d .devdeps ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.devdeps")
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGPUSLICE_BUILD_NODE=OFF -DGPUSLICE_BUILD_TESTS=OFF \
  -DGPUSLICE_BUILD_BENCH=OFF "${prefix[@]}" > "$R/build.log" 2>&1
cmake --build build -j"$(nproc)" --target gpuslice_preload gpuslice_cli >> "$R/build.log" 2>&1 ||
  { tail -30 "$R/build.log"; exit 1; }
echo "build ok at $((SECONDS - t0)) s"
OUT=$W timeout 220 bench/gpu/rm_alloc_round.sh > "$R/rm.txt" 2>&1
echo "rm_alloc_round: exit $? at $((SECONDS - t0)) s"
tar czf "$R/rm.tgz" -C "$W" rm_alloc 2>/dev/null
OUT=$W timeout 90 tests/gpu/vmm_host.sh > "$R/vmm.txt" 2>&1
echo "vmm_host: exit $? at $((SECONDS - t0)) s"
tar czf "$R/vmm.tgz" -C "$W" vmm_host 2>/dev/null
left=$((560 - (SECONDS - t0)))
MODES=mps SECONDS_PER=15 ALONE_SECONDS=6 PRIORITY_ARGS="--loads 60 --only-priorities" OUT=$W/p7 \
  timeout "$left" bench/gpu/priority_mps_round.sh req7ms > "$R/p7.txt" 2>&1
echo "req7ms 60% mps: exit $? at $((SECONDS - t0)) s"
cp "$W/p7/req7ms-mps/log.txt" "$R/p7log.txt" 2>/dev/null
tar czf "$R/p7.tgz" -C "$W" p7 2>/dev/null
tail -n 25 "$R/rm.txt"; cat "$R/vmm.txt"; tail -n 20 "$R/p7.txt"
