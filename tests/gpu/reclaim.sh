#!/usr/bin/env bash
# Memory that follows priority on an H200 (docs/quota.md, "Guarantees and borrowing"; issue 47's
# done-when scaled to 3-5 minutes): a best-effort trainer borrowing 20+ GiB above its guarantee, a
# high-priority server allocating up to its guarantee, reclaim and restore timed, the trainer's loss
# curve compared bit for bit with a run alone, the server's p99 during the reclaim with alone
# (tests/gpu/reclaim.py says how). Builds the release library and CLI; logs in $OUT/reclaim/; a
# verdict table at the end. Needs python3 with torch.
#   tests/gpu/reclaim.sh [reclaim.py arguments...]
set -u
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:-gpu-out}/reclaim
mkdir -p "$out"
tests/gpu/build_release.sh "$out/build.log" gpuslice_preload gpuslice_cli || { echo "FAIL build"; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.txt" 2>&1
python3 tests/gpu/reclaim.py --lib build/lib/libgpuslice.so --cli build/bin/gpuslice --out "$out" "$@" 2>&1 |
  tee "$out/reclaim.txt"
exit "${PIPESTATUS[0]}"
