#!/usr/bin/env bash
# The quota against the driver's own figures, on a bare GPU machine, in one command (about 5 min):
# builds libgpuslice.so and tests/gpu/driver_paths.cu, then runs tests/gpu/driver_paths.py (each
# driver path under an 8 GiB quota, the 8- and 32-process load tests). Logs and JSON under $OUT.
#   OUT=/tmp/out tests/gpu/driver_paths.sh [--cases heap,stack,...] [--seconds 60] [--device 0]
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-out}
mkdir -p "$out"
: > "$out/build.log"
tests/gpu/build_release.sh "$out/build.log" gpuslice_preload || exit 1
mkdir -p build/gpu
nvcc -O2 -arch=sm_90 -o build/gpu/driver_paths tests/gpu/driver_paths.cu -lcuda >> "$out/build.log" 2>&1 ||
  { tail -20 "$out/build.log"; exit 1; }
# 12 GiB of host shadows of the device arrays: the medium code model and the shared runtime link it.
nvcc -O2 -arch=sm_90 -cudart shared -Xcompiler -mcmodel=medium -o build/gpu/quota_globals tests/gpu/quota_globals.cu -lcuda >> "$out/build.log" 2>&1 ||
  { tail -20 "$out/build.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/env.txt"
python3 tests/gpu/driver_paths.py --lib build/lib/libgpuslice.so --prog build/gpu/driver_paths \
  --globals-prog build/gpu/quota_globals --out "$out" "$@" |
  tee "$out/driver_paths.txt"
exit "${PIPESTATUS[0]}"
