#!/usr/bin/env bash
# Device call 4 of 2026-11-29-d (one H200): issue 47 with the reclaim on its own thread every 20 ms
# (call 3: the moves held the server at its alone speed, but the watcher's 100 ms tick left the
# trainer running beside it for the first tenth of the wait) and "during the reclaim" the big block's
# wait itself; requests of about 1 ms (matmul 4096) and about 7 ms (matmul 8192).
set -uo pipefail
R=$OUT
t0=$SECONDS
tests/gpu/build_release.sh "$R/build.log" gpuslice_preload gpuslice_cli || exit 1
echo "build ok at $((SECONDS - t0)) s"
W=/tmp/c4; mkdir -p "$W"
for m in 4096 8192; do
  python3 tests/gpu/reclaim.py --lib build/lib/libgpuslice.so --cli build/bin/gpuslice --out "$W/reclaim-$m" \
    --train-seconds 25 --hold-s 3 --seconds 45 --matmul $m > "$W/reclaim-$m.txt" 2>&1
  echo "reclaim matmul $m: exit $? at $((SECONDS - t0)) s"
  tar czf "$R/reclaim-$m.tgz" -C "$W" "reclaim-$m" "reclaim-$m.txt"
  grep -v "^step=" "$W/reclaim-$m.txt" | tail -n 16
done
