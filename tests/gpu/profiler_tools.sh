#!/usr/bin/env bash
# The quota under NVIDIA's developer tools: Nsight Compute (ncu), Nsight Systems (nsys) and
# compute-sanitizer, each with the library preloaded inside the tool's target ("inner": the tool
# runs `env LD_PRELOAD=... prog`) and around the tool ("outer": a container whose environment
# preloads the library runs the tool), for a CUDA runtime program and for PyTorch.
# Expects build/lib/libgpuslice.so (tests/gpu/run.sh builds it). Output: $OUT/profiler_tools.txt.
set -u
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-out}
mkdir -p "$out" build/gpu
nvcc -O2 -arch=sm_90 -o build/gpu/tool_probe tests/gpu/tool_probe.cu -ldl -lcuda >>"$out/build.log" 2>&1 ||
  { echo "cannot build tool_probe"; exit 1; }
lib=$PWD/build/lib/libgpuslice.so
quota=$((8 << 30))
nsys_bin=$(command -v nsys || ls /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | head -1)
torch_probe='import torch,sys; f,t=torch.cuda.mem_get_info(); ok=f<=t==8<<30
try:
    x=torch.empty(9<<30,dtype=torch.uint8,device="cuda"); ok=False
except torch.OutOfMemoryError: pass
print("torch total", t, "RESULT", "PASS" if ok else "FAIL"); sys.exit(0 if ok else 1)'
declare -A tool_cmd=(
  [ncu]="ncu --clock-control none --launch-count 1 --metrics gpu__time_duration.sum"
  [compute-sanitizer]="compute-sanitizer --print-limit 1"
  [nsys]="${nsys_bin:-nsys} profile --force-overwrite true -o /tmp/gpuslice-nsys")
limit_env() { echo "LD_PRELOAD=$lib GPUSLICE_MEMORY_LIMIT=8Gi GPUSLICE_SHARED_DIR=$(mktemp -d)"; }
pass=0 fail=0
{
  for tool in ncu compute-sanitizer nsys; do
    for prog in runtime torch; do
      case $prog in
        runtime) target=(build/gpu/tool_probe "$quota") ;;
        torch) target=(python3 -c "$torch_probe") ;;
      esac
      for where in inner outer; do
        if [ $where = inner ]; then
          line=$(timeout 300 ${tool_cmd[$tool]} env $(limit_env) "${target[@]}" 2>&1 | grep "RESULT" | tail -1)
        else
          line=$(env $(limit_env) timeout 300 ${tool_cmd[$tool]} "${target[@]}" 2>&1 | grep "RESULT" | tail -1)
        fi
        case $line in *PASS*) pass=$((pass + 1)); verdict=PASS ;; *) fail=$((fail + 1)); verdict=FAIL ;; esac
        printf '%-18s %-8s %-6s %s   (%s)\n' "$tool" "$prog" "$where" "$verdict" "$line"
      done
    done
  done
  echo "profiler tools: $pass passed, $fail failed"
} 2>&1 | tee "$out/profiler_tools.txt"
grep -q ", 0 failed" "$out/profiler_tools.txt"
