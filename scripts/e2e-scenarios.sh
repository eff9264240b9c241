#!/usr/bin/env bash
# The interposer's end-to-end scenarios (quota on every path to the driver, refusal, free, one quota
# shared by two processes, the NVML view, the compute gate), for a build whose programs cannot be
# started directly: another architecture under qemu-user, or another glibc through its own loader.
# Usage: scripts/e2e-scenarios.sh BUILD_DIR [LAUNCHER...]
#   BUILD_DIR holds bin/probe_app, bin/rtld_next_probe, lib/libgpuslice.so and mock/ (the simulated driver); every probe
#   process is started as LAUNCHER... BUILD_DIR/bin/probe_app ARGS with LD_PRELOAD and
#   LD_LIBRARY_PATH set. The launcher must pass the environment on (qemu-user and ld.so do).
# Not GoogleTest: the gtest suite (tests/e2e) starts its probes itself, with no launcher in between;
# this driver stays on the host and only the probes run in the foreign environment.
set -euo pipefail
build=$(cd "$1" && pwd)
shift
launcher=("$@")
work=$(mktemp -d /tmp/gpuslice-scenarios-XXXXXX)
holder_pid=""
cleanup() {
  [ -n "$holder_pid" ] && kill "$holder_pid" 2>/dev/null && wait "$holder_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
MiB=$((1 << 20)); GiB=$((1 << 30)); context=$((64 * MiB))
failures=0; checks=0

# env for one "container" (a fresh state directory per scenario)
container_env() {
  local dir="$work/$1"
  mkdir -p "$dir"
  env_args=(env -i PATH=/usr/bin:/bin "LD_PRELOAD=$build/lib/libgpuslice.so" "LD_LIBRARY_PATH=$build/mock"
            "GPUSLICE_SHARED_DIR=$dir/shared" "GPUSLICE_LIMITS_FILE=$dir/limits" "GPUSLICE_NODE_DIR=$dir/node"
            "GPUSLICE_MOCK_STATE_DIR=$dir/mock" GPUSLICE_MOCK_DEVICES=2 "GPUSLICE_MOCK_MEMORY=$((16 * GiB))"
            "GPUSLICE_MOCK_CONTEXT_BYTES=$context")
}
# probe [VAR=VALUE...] ARGS...: one probe process in the current container
probe() {
  local vars=()
  while [[ ${1:-} == *=* ]]; do vars+=("$1"); shift; done
  "${env_args[@]}" "${vars[@]}" "${launcher[@]}" "$build/bin/probe_app" "$@"
}
passed() { [ "$failures" -eq "$1" ] && echo "ok: $scenario"; return 0; }
# probe's output has key=value lines
value() { sed -n "s/^$1=//p" <<<"$2" | head -n1; }
expect() {  # expect NAME ACTUAL OP EXPECTED   (OP: -eq, -ge or =)
  checks=$((checks + 1))
  local ok=false
  if [ -n "$2" ]; then
    case $3 in
      -eq) [ "$2" -eq "$4" ] && ok=true ;;
      -ge) [ "$2" -ge "$4" ] && ok=true ;;
      =) [ "$2" = "$4" ] && ok=true ;;
    esac
  fi
  $ok && return 0
  echo "FAIL [$scenario] $1: got '${2}', expected $3 $4" >&2
  [ -z "$2" ] && [ -n "${out:-}" ] && echo "  probe output: $(head -c 600 <<<"$out")" >&2
  failures=$((failures + 1))
}

for path in procaddress dlsym linked; do
  scenario="quota, refusal and free ($path)"; before=$failures
  container_env "fill-$path"
  out=$(probe GPUSLICE_MEMORY_LIMIT=1Gi --path "$path" --scenario fill --chunk $((64 * MiB)) 2>&1) || true
  expect total "$(value total "$out")" -eq $GiB
  expect free "$(value free "$out")" -eq $((GiB - context))
  expect refused_code "$(value refused_code "$out")" -eq 2
  expect allocated "$(value allocated "$out")" -eq $(((GiB - context) / (64 * MiB) * 64 * MiB))
  expect retry_code "$(value retry_code "$out")" -eq 0
  expect end_free "$(value end_free "$out")" -eq $((GiB - context))
  passed "$before"
done

scenario="two processes share one quota, NVML shows it"; before=$failures
container_env shared
probe GPUSLICE_MEMORY_LIMIT=0=2Gi --scenario hold --bytes $GiB --seconds 60 >"$work/holder.out" 2>&1 &
holder_pid=$!
for _ in $(seq 600); do grep -q '^hold_code=' "$work/holder.out" && break; sleep 0.1; done
expect hold_code "$(value hold_code "$(cat "$work/holder.out")")" -eq 0
out=$(probe GPUSLICE_MEMORY_LIMIT=0=2Gi --scenario fill --chunk $((64 * MiB)) 2>&1) || true
expect total "$(value total "$out")" -eq $((2 * GiB))
expect free "$(value free "$out")" -eq $((GiB - 2 * context))
# The fill probe has exited: its context's charge returns once a live process reaps it (within 1 s).
sleep 1.2
out=$(probe GPUSLICE_MEMORY_LIMIT=0=2Gi --scenario nvml 2>&1) || true
expect nvml_init "$(value nvml_init "$out")" -eq 0
expect nvml0_total "$(value nvml0_total "$out")" -eq $((2 * GiB))
expect nvml0_used "$(value nvml0_used "$out")" -eq $((GiB + context))
expect nvml1_total "$(value nvml1_total "$out")" -eq $((16 * GiB))
kill "$holder_pid" 2>/dev/null; wait "$holder_pid" 2>/dev/null || true; holder_pid=""
passed "$before"

scenario="RTLD_NEXT stays relative to the caller"; before=$failures
container_env rtld-next
out=$("${env_args[@]}" "${launcher[@]}" "$build/bin/rtld_next_probe" 2>&1) || true
object=$(value rtld_next_dlsym_object "$out")
expect rtld_next_dlsym_object "${object##*/}" = libgpuslice.so
passed "$before"

# 600 kernels of 500 us: 300 ms of device time; under a 25% limit at least ~4x that (lower bound
# only: a loaded machine or an emulator can only make it slower).
scenario="compute gate"; before=$failures
container_env compute
out=$(probe GPUSLICE_COMPUTE_LIMIT=25 --scenario launch --iterations 600 --kernel-us 500 2>&1) || true
expect launched "$(value launched "$out")" -eq 600
expect launch_wall_ns "$(value launch_wall_ns "$out")" -ge $((600 * 500000 * 4 * 8 / 10))
passed "$before"

if [ "$failures" -ne 0 ]; then
  echo "e2e scenarios: $failures of $checks checks failed" >&2
  exit 1
fi
echo "e2e scenarios: all $checks checks passed"
