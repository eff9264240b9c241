#!/usr/bin/env bash
# One device-tool call: build gpuslice and the CUDA test programs on the GPU machine, then run the
# functional scenarios and the overhead benchmark. Logs go to $OUT (or ./gpu-out).
#   tests/gpu/run.sh [functional] [overhead] [paired] [accuracy] [multi] [two]
# (GPU_SKIP: functional groups to skip; TWO_ARGS: extra two_containers.py arguments)
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-out}
mkdir -p "$out"
what=${*:-functional overhead}
export PYTHONUNBUFFERED=1
{
  nvidia-smi -L; nvidia-smi --query-gpu=driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
} 2>&1 | tee "$out/env.txt"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGPUSLICE_BUILD_NODE=OFF -DGPUSLICE_BUILD_TESTS=OFF \
  -DGPUSLICE_BUILD_BENCH=OFF > "$out/build.log" 2>&1
cmake --build build -j"$(nproc)" --target gpuslice_preload gpuslice_cli gpuslice_mock_cuda >> "$out/build.log" 2>&1 ||
  { tail -40 "$out/build.log"; exit 1; }
mkdir -p build/gpu
# The e2e probe, linked to libcuda.so.1 by soname: here that resolves to the real driver.
g++ -std=c++20 -O2 -Isrc -o build/gpu/probe_app tests/e2e/probe_app.cpp build/mock/libcuda.so.1 -ldl -lpthread \
  >> "$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
for prog in tests/gpu/runtime_quota.cu bench/gpu/launch_alloc.cu bench/gpu/paired.cu; do
  nvcc -O2 -arch=sm_90 -o "build/gpu/$(basename "$prog" .cu)" "$prog" -ldl >> "$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
done
echo "build ok"
# SM clock and power in the background: the compute-limit accuracy depends on them (a duty-cycled
# GPU boosts higher than one running flat out).
nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw,utilization.gpu --format=csv,noheader -lms 500 \
  > "$out/clocks.csv" 2>/dev/null &
clocks_pid=$!
trap 'kill $clocks_pid 2>/dev/null' EXIT
rc=0
for w in $what; do
  case $w in
    functional) python3 tests/gpu/functional.py --build build --out "$out" ${GPU_SKIP:+--skip "$GPU_SKIP"} || rc=1 ;;
    paired)
      # In-process pairs: no limit, a quota, a quota with the profiler on.
      lib=$PWD/build/lib/libgpuslice.so
      { echo "## no limit"; LD_PRELOAD=$lib build/gpu/paired 30
        echo "## memory quota"; LD_PRELOAD=$lib GPUSLICE_MEMORY_LIMIT=60Gi GPUSLICE_SHARED_DIR=$(mktemp -d) build/gpu/paired 30
        echo "## memory quota + profiler"; LD_PRELOAD=$lib GPUSLICE_MEMORY_LIMIT=60Gi GPUSLICE_SHARED_DIR=$(mktemp -d) \
          GPUSLICE_PROFILE_DIR=$(mktemp -d) build/gpu/paired 30; } 2>&1 | tee "$out/paired.txt" ;;
    overhead) python3 bench/gpu/overhead.py --build build --out "$out" --reps "${REPS:-7}" ${OVERHEAD_SKIP:+--skip "$OVERHEAD_SKIP"} | tee "$out/overhead.txt" ;;
    accuracy) python3 bench/gpu/compute_accuracy.py --lib build/lib/libgpuslice.so --out "$out" | tee "$out/accuracy.txt" ;;
    multi) python3 tests/gpu/multi_gpu.py --build build --out "$out" || rc=1 ;;
    two) python3 tests/gpu/two_containers.py --lib build/lib/libgpuslice.so --out "$out" ${TWO_ARGS:-} | tee "$out/two_containers.txt" ;;
  esac
done
exit $rc
