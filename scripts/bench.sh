#!/usr/bin/env bash
# Runs the simulated-driver microbenchmarks three ways — no limits, a memory quota, quota plus
# profiler — each comparing hooked with un-hooked calls in the same process, and prints the ratios.
set -euo pipefail
build=${1:-build}
out=${2:-$build/bench-results}
mkdir -p "$out"
tmp=$(mktemp -d /tmp/gpuslice-bench-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
common=(env LD_LIBRARY_PATH="$build/mock" LD_PRELOAD="$build/lib/libgpuslice.so" GPUSLICE_MOCK_STATE_DIR="$tmp/mock"
        GPUSLICE_SHARED_DIR="$tmp/shared")
run() {
  local name=$1; shift
  "${common[@]}" "$@" "$build/bin/hook_bench" --benchmark_repetitions="${REPS:-5}" \
    --benchmark_report_aggregates_only=true --benchmark_out="$out/$name.json" --benchmark_out_format=json >/dev/null
}
run plain
run quota GPUSLICE_MEMORY_LIMIT=60Gi
run profiled GPUSLICE_MEMORY_LIMIT=60Gi GPUSLICE_PROFILE_DIR="$tmp/profile"
python3 "$(dirname "$0")/../bench/report.py" "$out/plain.json" "$out/quota.json" "$out/profiled.json"
