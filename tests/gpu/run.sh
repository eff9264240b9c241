#!/usr/bin/env bash
# One device-tool call: build gpuslice and the CUDA test programs on the GPU machine, then run the
# functional scenarios and the overhead benchmark. Logs go to $OUT (or ./gpu-out).
#   tests/gpu/run.sh [functional] [overhead] [paired] [accuracy] [multi] [two] [tools] [ab] [launchab] [priority] [nvml] [ipc] [capture] [paths]
# (GPU_SKIP: functional groups to skip; TWO_ARGS: extra two_containers.py arguments;
#  PRIORITY_ARGS: extra priority_bench.py arguments)
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
# The GPU machine has no package manager: header-only build dependencies the CLI needs
# (nlohmann-json) may be carried in .devdeps/ (a CMake prefix: include/ and share/cmake/).
: > "$out/build.log"
tests/gpu/build_release.sh "$out/build.log" gpuslice_preload gpuslice_preload_ab gpuslice_cli gpuslice_mock_cuda || exit 1
mkdir -p build/gpu
# The e2e probe, linked to libcuda.so.1 by soname: here that resolves to the real driver.
g++ -std=c++20 -O2 -Isrc -o build/gpu/probe_app tests/e2e/probe_app.cpp build/mock/libcuda.so.1 -ldl -lpthread \
  >> "$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
for prog in tests/gpu/runtime_quota.cu bench/gpu/launch_alloc.cu bench/gpu/paired.cu bench/gpu/launch_ab.cu; do
  nvcc -O2 -arch=sm_90 -o "build/gpu/$(basename "$prog" .cu)" "$prog" -ldl >> "$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
done
# Thread-block clusters through cudaLaunchKernelEx, for compute_accuracy.py's `cluster` workload.
nvcc -O2 -arch=sm_90 -shared -Xcompiler -fPIC -o build/gpu/libcluster_spin.so bench/gpu/cluster_spin.cu \
  >> "$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
# compute_accuracy.py --kernel-timeline: kernels' device timestamps through CUPTI (optional: a
# toolkit without CUPTI skips it).
cuda_root=$(dirname "$(dirname "$(command -v nvcc)")")
nvcc -O2 -std=c++17 -shared -Xcompiler -fPIC -I"$cuda_root/extras/CUPTI/include" -o build/gpu/libkernel_timeline.so \
  bench/gpu/kernel_timeline.cpp -L"$cuda_root/extras/CUPTI/lib64" -lcupti \
  -Xlinker -rpath,"$cuda_root/lib64:$cuda_root/extras/CUPTI/lib64" >> "$out/build.log" 2>&1 ||
  echo "kernel timeline not built (no CUPTI): compute_accuracy.py --kernel-timeline unavailable" | tee -a "$out/build.log"
# Two processes sharing memory (ipc): the driver API too.
nvcc -O2 -std=c++17 -arch=sm_90 -o build/gpu/ipc tests/gpu/ipc.cu -lcuda >> "$out/build.log" 2>&1 ||
  { tail -20 "$out/build.log"; exit 1; }
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
        echo "## memory quota + compute limit 100"; LD_PRELOAD=$lib GPUSLICE_MEMORY_LIMIT=60Gi GPUSLICE_COMPUTE_LIMIT=100 \
          GPUSLICE_SHARED_DIR=$(mktemp -d) build/gpu/paired 30
        echo "## memory quota + profiler"; LD_PRELOAD=$lib GPUSLICE_MEMORY_LIMIT=60Gi GPUSLICE_SHARED_DIR=$(mktemp -d) \
          GPUSLICE_PROFILE_DIR=$(mktemp -d) build/gpu/paired 30; } 2>&1 | tee "$out/paired.txt" ;;
    launchab)
      # Launch and alloc/free through the same A/B stub, hooked vs straight to the driver, in one
      # process pinned to one core (bench/gpu/launch_ab.cu; about 20 s a configuration): no limit,
      # a quota, quota + compute limit 100, quota + profiler, and the A/A control (both sides bypassed).
      lib=$PWD/build/lib/libgpuslice-ab.so cpu=${AB_CPU:-4} n=${AB_ROUNDS:-400}
      { echo "## no limit"; taskset -c "$cpu" env LD_PRELOAD="$lib" build/gpu/launch_ab "$n"
        echo "## memory quota"; taskset -c "$cpu" env LD_PRELOAD="$lib" GPUSLICE_MEMORY_LIMIT=60Gi \
          GPUSLICE_SHARED_DIR="$(mktemp -d)" build/gpu/launch_ab "$n"
        echo "## memory quota + compute limit 100"; taskset -c "$cpu" env LD_PRELOAD="$lib" GPUSLICE_MEMORY_LIMIT=60Gi \
          GPUSLICE_COMPUTE_LIMIT=100 GPUSLICE_SHARED_DIR="$(mktemp -d)" build/gpu/launch_ab "$n"
        echo "## memory quota + profiler"; taskset -c "$cpu" env LD_PRELOAD="$lib" GPUSLICE_MEMORY_LIMIT=60Gi \
          GPUSLICE_SHARED_DIR="$(mktemp -d)" GPUSLICE_PROFILE_DIR="$(mktemp -d)" build/gpu/launch_ab "$n"
        echo "## A/A control (no limit, both sides bypassed)"; taskset -c "$cpu" env LD_PRELOAD="$lib" \
          build/gpu/launch_ab "$n" aa; } 2>&1 | tee "$out/launch_ab.txt"
      [ "$(grep -c '^errors=0' "$out/launch_ab.txt")" = 5 ] || rc=1 ;;
    ab) python3 bench/gpu/ab_overhead.py --lib build/lib/libgpuslice-ab.so --out "$out" | tee "$out/ab_overhead.txt" || rc=1 ;;
    overhead) python3 bench/gpu/overhead.py --build build --out "$out" --reps "${REPS:-7}" ${OVERHEAD_SKIP:+--skip "$OVERHEAD_SKIP"} | tee "$out/overhead.txt" ;;
    accuracy) python3 bench/gpu/compute_accuracy.py --lib build/lib/libgpuslice.so --out "$out" | tee "$out/accuracy.txt" ;;
    multi) python3 tests/gpu/multi_gpu.py --build build --out "$out" || rc=1 ;;
    tools) bash tests/gpu/profiler_tools.sh || rc=1 ;;
    nvml) bash tests/gpu/nvml_view.sh || rc=1 ;;  # nvidia-smi in two containers (about 30 s)
    # A per-thread-default-stream program capturing a graph under each gate (about 20 s).
    capture) bash tests/gpu/per_thread_capture.sh build/lib/libgpuslice.so | tee "$out/per_thread_capture.txt"; [ "${PIPESTATUS[0]}" = 0 ] || rc=1 ;;
    # Each driver path and the load tests against the driver's own figures (about 5 min; driver_paths.sh).
    paths) nvcc -O2 -arch=sm_90 -o build/gpu/driver_paths tests/gpu/driver_paths.cu -lcuda >> "$out/build.log" 2>&1 &&
      python3 tests/gpu/driver_paths.py --lib build/lib/libgpuslice.so --prog build/gpu/driver_paths --out "$out" \
        | tee "$out/driver_paths.txt"; [ "${PIPESTATUS[0]}" = 0 ] || rc=1 ;;
    ipc) python3 tests/gpu/ipc.py --lib build/lib/libgpuslice.so --cli build/bin/gpuslice --out "$out" | tee "$out/ipc.txt"; [ "${PIPESTATUS[0]}" = 0 ] || rc=1 ;;
    two) python3 tests/gpu/two_containers.py --lib build/lib/libgpuslice.so --out "$out" ${TWO_ARGS:-} | tee "$out/two_containers.txt" ;;
    # A latency-critical server beside a best-effort trainer: alone, un-managed, 50/50 limits,
    # priorities (about 8 minutes).
    priority) python3 bench/gpu/priority_bench.py --lib build/lib/libgpuslice.so --cli build/bin/gpuslice \
      --out "$out" ${PRIORITY_ARGS:-} | tee "$out/priority.txt" ;;
  esac
done
exit $rc
