#!/usr/bin/env bash
# Device call 2 of 2026-11-29-d (one H200): issue 47 again after call 1 (18 GiB took 9.5 s to move:
# the host memory was created and pinned during the move): host memory prepared ahead by the
# borrower, the slowest server requests placed against the big block's wait. The whole reclaim
# directory comes back as one archive.
set -uo pipefail
R=$OUT
t0=$SECONDS
tests/gpu/build_release.sh "$R/build.log" gpuslice_preload gpuslice_cli || exit 1
echo "build ok at $((SECONDS - t0)) s"
W=/tmp/c2; mkdir -p "$W"
OUT=$W timeout 300 tests/gpu/reclaim.sh --train-seconds 30 --hold-s 3 --seconds 45 > "$R/reclaim.out" 2>&1
echo "reclaim: exit $? at $((SECONDS - t0)) s"
tar czf "$R/reclaim.tgz" -C "$W" reclaim
grep -v "^step=" "$R/reclaim.out" | tail -n 40
grep -h "reclaim:" "$W"/reclaim/trainer-with.log | grep -v "prepared in" | head -30
