#!/usr/bin/env bash
# Issue 42's last question in one device call (about 3 min on one H200): does every device allocation of
# the held-out paths pass the resource manager's allocation ioctl, and what does watching it cost?
# Builds the RM probe (bench/gpu/rm_alloc_probe.so: gcc, libc + libdl only; no libgpuslice) and the path
# programs (tests/gpu/driver_paths.cu, tests/gpu/quota_globals.cu, bench/gpu/rm_alloc_cost.cu), checks that
# libcuda reaches the kernel through the ioctl symbol the probe interposes (and cross-checks with strace),
# then runs bench/gpu/rm_alloc_round.py: each path without a quota under the probe, NVML sampled at 50 Hz
# from outside; the paths that exceed 8 GiB again with the RM's NV_ERR_NO_MEMORY injected at the ioctl above
# 8 GiB (how libcuda takes a refusal there; 30 s cap each); the probe's cost in interleaved A/B. Logs under
# $OUT/rm_alloc/; the tables and the verdict at the end.
#   OUT=/tmp/out bench/gpu/rm_alloc_round.sh [--cases calib,contexts,...] [--deny-cases ...|--deny-cases ''] \
#                                           [--ab 5] [--iters 2000]        (DEVICE=0 by default)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:-gpu-out}/rm_alloc
mkdir -p "$out" build/gpu
export PYTHONUNBUFFERED=1
{
  nvidia-smi -L; nvidia-smi --query-gpu=driver_version,memory.total --format=csv,noheader
  head -1 /proc/driver/nvidia/version 2>/dev/null
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)' 2>&1 | tail -1
} 2>&1 | tee "$out/env.txt"
: > "$out/build.log"
gcc -std=gnu11 -O2 -Wall -Wextra -shared -fPIC -fvisibility=hidden -o build/gpu/rm_alloc_probe.so \
  bench/gpu/rm_alloc_probe.c bench/gpu/rm_alloc_decode.c -ldl -pthread >> "$out/build.log" 2>&1 ||
  { tail -20 "$out/build.log"; exit 1; }
nvcc -O2 -arch=sm_90 -o build/gpu/driver_paths tests/gpu/driver_paths.cu -lcuda >> "$out/build.log" 2>&1 ||
  { tail -20 "$out/build.log"; exit 1; }
# 12 GiB of host shadows of the device arrays: the medium code model and the shared runtime link it.
nvcc -O2 -arch=sm_90 -cudart shared -Xcompiler -mcmodel=medium -o build/gpu/quota_globals tests/gpu/quota_globals.cu \
  -lcuda >> "$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
nvcc -O2 -arch=sm_90 -o build/gpu/rm_alloc_cost bench/gpu/rm_alloc_cost.cu -lcuda -ldl >> "$out/build.log" 2>&1 ||
  { tail -20 "$out/build.log"; exit 1; }
echo "build ok"

# The probe sees only calls through the dynamic ioctl symbol: libcuda must import it.
libcuda=$(ldconfig -p | awk '/libcuda.so.1/{print $NF; exit}')
echo "libcuda: ${libcuda:-not found}" | tee "$out/imports.txt"
if [ -z "$libcuda" ]; then
  echo "libcuda.so.1 is not in the loader's cache: nothing to check (and nothing will run)" | tee -a "$out/imports.txt"
elif ! command -v nm > /dev/null; then
  echo "nm absent (binutils): cannot read libcuda's imports; the strace count below and the probe's counts decide" |
    tee -a "$out/imports.txt"
elif nm -D --undefined-only "$libcuda" 2>/dev/null | grep -w ioctl | tee -a "$out/imports.txt" |
  grep -q .; then
  echo "libcuda imports ioctl dynamically: the probe is on its path" | tee -a "$out/imports.txt"
else
  {
    echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
    echo "!!! libcuda does NOT import ioctl (it makes the syscall itself): an LD_PRELOAD ioctl hook      !!!"
    echo "!!! sees NOTHING of libcuda's RM calls; only the strace count below says what the kernel got. !!!"
    echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
  } | tee -a "$out/imports.txt"
fi
[ -n "$libcuda" ] && nm -D --undefined-only "$libcuda" 2>/dev/null |
  grep -Ew 'syscall|open|open64|openat|openat64|mmap|mmap64' >> "$out/imports.txt"

# Cross-check (seccomp-free): every ioctl the kernel received on an NVIDIA fd in the calibration program,
# counted by strace, against what the probe saw in the same run.
if command -v strace > /dev/null; then
  mkdir -p "$out/strace"
  rm -f "$out/strace/probe."*
  RM_PROBE_LOG=$out/strace/probe LD_PRELOAD=$PWD/build/gpu/rm_alloc_probe.so CUDA_VISIBLE_DEVICES=${DEVICE:-0} \
    strace -f -y -e trace=ioctl,write -o "$out/strace/trace.txt" build/gpu/rm_alloc_cost hold $((1 << 30)) 0 \
    > "$out/strace/stdout.txt" 2>&1
  # Up to the program's "probe_nv_ioctls=" line: the driver's teardown after main is the probe's blind spot
  # only in this count (its log ends with the process's destructors).
  kernel_nv=$(awk '/probe_nv_ioctls=/{exit} /ioctl\([0-9]+<\/dev\/nvidia/{n++} END{print n+0}' "$out/strace/trace.txt")
  probe_nv=$(sed -n 's/^probe_nv_ioctls=//p' "$out/strace/stdout.txt")
  strace -f -e trace=ioctl -c -o "$out/strace/summary.txt" build/gpu/rm_alloc_cost hold $((1 << 30)) 0 > /dev/null 2>&1
  if [ -z "$probe_nv" ] || [ "$kernel_nv" = 0 ]; then
    echo "strace: the traced run failed or traced nothing (ptrace refused?): see $out/strace/" |
      tee "$out/strace/verdict.txt"
  elif [ "$kernel_nv" = "$probe_nv" ]; then
    echo "strace: ioctls the kernel received on /dev/nvidia* = $kernel_nv, seen by the probe = $probe_nv (all seen)" |
      tee "$out/strace/verdict.txt"
  else
    echo "strace: ioctls the kernel received on /dev/nvidia* = $kernel_nv, seen by the probe = $probe_nv" \
      "(MISSING $((kernel_nv - probe_nv)): the probe is not on every path to the kernel)" | tee "$out/strace/verdict.txt"
  fi
else
  echo "strace: absent on this machine (no syscall-level cross-check)" | tee "$out/strace_absent.txt"
fi

python3 bench/gpu/rm_alloc_round.py --probe build/gpu/rm_alloc_probe.so --prog build/gpu/driver_paths \
  --globals-prog build/gpu/quota_globals --cost-prog build/gpu/rm_alloc_cost --out "$out" \
  --device "${DEVICE:-0}" "$@" | tee "$out/rm_alloc_round.txt"
rc=${PIPESTATUS[0]}
grep -E 'imports ioctl|NOT import|nm absent|not in the loader' "$out/imports.txt"
cat "$out/strace/verdict.txt" "$out/strace_absent.txt" 2>/dev/null
exit "$rc"
