#!/usr/bin/env bash
# Compute limits in three modes on the same shapes, one device call on one H200 (docs/compute-limiter.md,
# "Under MPS: SM partitioning or GPU time"): builds gpuslice and the cluster kernel, then runs
# bench/gpu/compute_accuracy.py three times, one mode after the other:
#   timesliced   no MPS: the GPU-time limiter (the default mode)
#   mpstime      an MPS control daemon for the run, GPUSLICE_MPS_COMPUTE=time: the GPU-time limiter
#   mpsthreads   the same daemon, GPUSLICE_MPS_COMPUTE=threads: the limit is the client's SM share
#                (one process per limit, phases as turns: compute_accuracy.py's docstring)
# each through 20/30/50/80% between unlimited phases, ALTERNATIONS times, and prints one table:
# shape x limit x mode -> throughput ratio (mean [min..max] (phases)), SM clock of the limited phases
# (of their unlimited neighbours). Logs and JSON under $OUT/compute-modes/<mode>/.
#
#   bench/gpu/compute_modes_round.sh          about 8 minutes on one H200 (build included)
#
# SHAPES (default graph,graph2p,mix,decode,streams4), ALTERNATIONS (default 2), SECONDS_PER
# (measured per phase, default 0.6), SETTLE (unmeasured after each change, default 0.4), MODES
# (default "timesliced mpstime mpsthreads"), ACCURACY_ARGS (more arguments for every mode).
# What the defaults leave out to fit 8 minutes (estimated: build 1-1.5 min, then about 25 s per shape
# and mode): long40 (40 ms kernels need phases of 3 s or more to hold enough kernels:
# SHAPES=long40 SECONDS_PER=3 ALTERNATIONS=1 is a call of its own), cluster and compile (SHAPES=
# cluster,compile: a second call of about 4 minutes), the third alternation (ALTERNATIONS=3 fits with
# SHAPES of three), the un-hooked processes before and after each run, and the CUPTI kernel timeline.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-compute-modes-out}/compute-modes
mkdir -p "$out"
export PYTHONUNBUFFERED=1
began=$(date +%s)
{
  nvidia-smi -L; nvidia-smi --query-gpu=driver_version,memory.total,compute_mode,clocks.max.sm --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
  command -v nvidia-cuda-mps-control || echo "no nvidia-cuda-mps-control"
} 2>&1 | tee "$out/env.txt"
: > "$out/build.log"
tests/gpu/build_release.sh "$out/build.log" gpuslice_preload gpuslice_cli || exit 1
mkdir -p build/gpu
nvcc -O2 -arch=sm_90 -shared -Xcompiler -fPIC -o build/gpu/libcluster_spin.so bench/gpu/cluster_spin.cu \
  >> "$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
echo "build ok ($(($(date +%s) - began)) s)"
# What reading the SM clock through NVML costs (a clock-corrected charge would read it off the launch
# path, docs/compute-limiter.md): per call, through ctypes (its own ~0.3 us included), after nvmlInit.
python3 - <<'PY' 2>&1 | tee "$out/nvml_clock_cost.txt"
import ctypes, time
nvml = ctypes.CDLL("libnvidia-ml.so.1")
t = time.perf_counter(); nvml.nvmlInit_v2(); init = time.perf_counter() - t
handle, mhz = ctypes.c_void_p(), ctypes.c_uint()
nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle))
for name, call in (("nvmlDeviceGetClockInfo(SM)", lambda: nvml.nvmlDeviceGetClockInfo(handle, 1, ctypes.byref(mhz))),
                   ("nvmlDeviceGetClock(SM, current)", lambda: nvml.nvmlDeviceGetClock(handle, 1, 0, ctypes.byref(mhz)))):
    call()
    per = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(2000):
            call()
        per.append((time.perf_counter() - t) / 2000 * 1e6)
    print(f"{name}: {min(per):.1f}-{max(per):.1f} us per call ({mhz.value} MHz); nvmlInit_v2 {init * 1e3:.0f} ms")
PY

alternations=${ALTERNATIONS:-2}
schedule=100
for _ in $(seq "$alternations"); do schedule+=",20,100,30,100,50,100,80,100"; done
accuracy=(python3 bench/gpu/compute_accuracy.py --lib build/lib/libgpuslice.so --cli build/bin/gpuslice
          --workloads "${SHAPES:-graph,graph2p,mix,decode,streams4}" --schedule "$schedule"
          --seconds "${SECONDS_PER:-0.6}" --settle "${SETTLE:-0.4}" --warmup 1 --no-unhooked)
modes=${MODES:-timesliced mpstime mpsthreads}
table=()
for mode in $modes; do
  case "$mode" in
    timesliced) extra=() ;;
    mpstime) extra=(--mps --mps-compute time) ;;
    mpsthreads) extra=(--mps --mps-compute threads) ;;
    *) echo "unknown mode $mode (timesliced, mpstime, mpsthreads)" >&2; exit 2 ;;
  esac
  start=$(date +%s)
  mkdir -p "$out/$mode"
  CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} "${accuracy[@]}" --out "$out/$mode" "${extra[@]}" \
    ${ACCURACY_ARGS:-} > "$out/$mode/log.txt" 2>&1 || true  # a FAIL verdict exits 1; the table says it
  echo "$mode: $(tail -n 1 "$out/$mode/log.txt") ($(($(date +%s) - start)) s)"
  [ -f "$out/$mode/compute_accuracy.json" ] && table+=("$mode=$out/$mode/compute_accuracy.json")
done
echo
echo "== shape x limit x mode (schedule $schedule; ${SECONDS_PER:-0.6} s measured per phase)"
if [ ${#table[@]} -gt 0 ]; then
  python3 bench/gpu/compute_accuracy.py --modes-table "${table[@]}" | tee "$out/table.md"
fi
grep -h "MPS client" "$out"/mps*/logs/*.log 2>/dev/null | sed 's/^\[gpuslice [0-9]*\] //' | sort | uniq -c | head -n 12
echo "total $(($(date +%s) - began)) s"
