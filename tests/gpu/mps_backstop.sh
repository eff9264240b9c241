#!/usr/bin/env bash
# MPS's pinned-memory limit as the backstop under the books, on a bare GPU machine (about 2 min):
# builds libgpuslice.so and tests/gpu/mps_backstop.cu, then runs tests/gpu/mps_backstop.py (64
# contexts and 12 GiB of module globals under an 8 GiB quota, under MPS and time-sliced).
#   OUT=/tmp/out CUDA_VISIBLE_DEVICES=0 tests/gpu/mps_backstop.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-out}
mkdir -p "$out"
: > "$out/build.log"
tests/gpu/build_release.sh "$out/build.log" gpuslice_preload || exit 1
mkdir -p build/gpu
# 12 GiB of globals need the medium code model for their (untouched) host shadow.
nvcc -O2 -arch=sm_90 -Xcompiler -mcmodel=medium -cudart shared -o build/gpu/mps_backstop \
  tests/gpu/mps_backstop.cu -lcuda >> "$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_mode --format=csv,noheader | tee "$out/env.txt"
python3 tests/gpu/mps_backstop.py --lib build/lib/libgpuslice.so --prog build/gpu/mps_backstop --out "$out" "$@" |
  tee "$out/mps_backstop.txt"
exit "${PIPESTATUS[0]}"
