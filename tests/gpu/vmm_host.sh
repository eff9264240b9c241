#!/usr/bin/env bash
# The driver's virtual memory as a reclaim would use it (docs/quota.md, "Guarantees and borrowing"):
# tests/gpu/vmm_host.cu on the bare driver, then under libgpuslice.so with a quota that holds the
# device allocation and the context but not a host-located handle of the same size as well (so the
# books charging host memory shows as a refused cuMemCreate). Logs in $OUT/vmm_host/; a verdict table.
#   tests/gpu/vmm_host.sh [LIBRARY] [BYTES]   (default build/lib/libgpuslice.so, 4 GiB)
set -u
cd "$(dirname "$0")/../.." || exit 1
lib=$(realpath "${1:-build/lib/libgpuslice.so}")
bytes=${2:-$((4 << 30))}
out=${OUT:-gpu-out}/vmm_host
mkdir -p "$out" build/gpu
nvcc -O2 -std=c++17 -arch=sm_90 -Isrc -o build/gpu/vmm_host tests/gpu/vmm_host.cu -lcuda -ldl > "$out/build.log" 2>&1 ||
  { tail -20 "$out/build.log"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rc=0
build/gpu/vmm_host "$bytes" > "$out/bare.log" 2>&1 || rc=1
quota=$((bytes + bytes / 2 + (1 << 30)))  # the device allocation, the context, not a second BYTES
env LD_PRELOAD="$lib" GPUSLICE_SHARED_DIR="$work/shared" GPUSLICE_MEMORY_LIMIT="$quota" GPUSLICE_LOG_LEVEL=info \
  build/gpu/vmm_host "$bytes" > "$out/quota.log" 2>&1 || rc=1
printf '%-8s %-6s %s\n' run result details
for run in bare quota; do
  log=$out/$run.log
  verdict=PASS
  grep -q '^FAIL' "$log" && verdict=FAIL
  grep -q 'end_free_delta=' "$log" || verdict=FAIL
  printf '%-8s %-6s %s\n' "$run" "$verdict" \
    "$(grep -oE '(host_handle_free_drop|host_handle_figure_growth|to_host_gbps|to_device_gbps|host_over_device|granularity_host)=[^ ]+' "$log" | tr '\n' ' ')"
  grep '^FAIL' "$log" | sed 's/^/    /'
done
exit $rc
