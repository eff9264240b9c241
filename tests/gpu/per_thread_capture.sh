#!/usr/bin/env bash
# A program built for per-thread default streams captures a graph on its own stream under the
# library: without a limit, under a compute limit, and as a low priority beside an idle high one
# (tests/gpu/per_thread_capture.cu). Prints one PASS/FAIL line per case; exit 1 on any FAIL.
#   tests/gpu/per_thread_capture.sh [LIBRARY]   (default build/lib/libgpuslice.so)
set -u
cd "$(dirname "$0")/../.."
lib=$(realpath "${1:-build/lib/libgpuslice.so}")
mkdir -p build/gpu
nvcc -O2 -arch=sm_90 --default-stream per-thread -o build/gpu/per_thread_capture tests/gpu/per_thread_capture.cu ||
  exit 1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rc=0
check() {  # NAME VAR=VALUE...: runs the capture case with the library and those variables
  local name=$1
  shift
  mkdir -p "$work/$name"
  env LD_PRELOAD="$lib" GPUSLICE_SHARED_DIR="$work/$name" GPUSLICE_LOG_LEVEL=info "$@" \
    build/gpu/per_thread_capture capture > "$work/$name.out" 2>&1
  local code=$?
  local verdict=PASS
  [ $code = 0 ] && grep -q '^capture=ok' "$work/$name.out" && grep -q '^replay=ok' "$work/$name.out" || { verdict=FAIL; rc=1; }
  echo "$verdict $name: exit $code; $(grep -E '^(launches|capture|replay)=' "$work/$name.out" | tr '\n' ' ')"
  grep -E 'priority gate|compute limiter' "$work/$name.out" | sed 's/^/    /'
}
check no-limit
check compute-50 GPUSLICE_COMPUTE_LIMIT=50
mkdir -p "$work/high" "$work/node"
# The operator's word (docs/priority.md): this user's containers may run up to high.
echo priority=high > "$work/node/uid-$(id -u).assigned"
env LD_PRELOAD="$lib" GPUSLICE_SHARED_DIR="$work/high" GPUSLICE_NODE_DIR="$work/node" GPUSLICE_PRIORITY=high \
  build/gpu/per_thread_capture idle 10 > "$work/high.out" 2>&1 &
high=$!
sleep 1
check low-beside-idle-high GPUSLICE_NODE_DIR="$work/node" GPUSLICE_PRIORITY=low
wait $high
exit $rc
