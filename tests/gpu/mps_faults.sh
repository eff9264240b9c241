#!/usr/bin/env bash
# One device-tool call (about 1-2 minutes, as root): build the gpuslice CLI (its `mps serve` is the
# manager gpuslice-node --mps runs; no gRPC needed) and the MPS test client, then tests/gpu/mps_faults.py:
# two MPS clients, one ended by an illegal address and one by SIGKILL, what the other saw, the
# control daemon killed and restarted, a clean stop. Logs in $OUT/mps (default gpu-out/mps).
#   tests/gpu/mps_faults.sh        (MPS_GPU: the GPU index the clients use, default 0)
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-out}
mkdir -p "$out/mps"
if ! command -v nvidia-cuda-mps-control >/dev/null; then
  echo "nvidia-cuda-mps-control is not on PATH ($PATH): MPS cannot be measured here"
  exit 2
fi
: > "$out/mps/build.log"
tests/gpu/build_release.sh "$out/mps/build.log" gpuslice_cli || exit 1
mkdir -p build/gpu
nvcc -O2 -arch=sm_90 -o build/gpu/mps_client tests/gpu/mps_client.cu >> "$out/mps/build.log" 2>&1 ||
  { tail -30 "$out/mps/build.log"; exit 1; }
echo "build ok"
python3 tests/gpu/mps_faults.py --build build --out "$out" ${MPS_GPU:+--gpu "$MPS_GPU"}
