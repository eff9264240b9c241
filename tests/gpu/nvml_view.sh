#!/usr/bin/env bash
# What nvidia-smi shows inside a container (issue: the process list and GPU-Util described the
# whole card). Two "containers" share GPU 0: A (GPUSLICE_MEMORY_LIMIT=8Gi) runs matmuls back to
# back, B (4Gi) holds memory and idles. nvidia-smi runs under LD_PRELOAD inside each and on the
# host (no library); each container must see only its own process, its quota as total, and its
# own GPU-Util. Logs: $OUT/nvml-*.txt; one PASS/FAIL line per check; exit 1 on any FAIL.
# Expects build/lib/libgpuslice.so (tests/gpu/run.sh builds it; built here when missing).
# About 20-30 s with the library built.
set -u
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:-gpu-out}
mkdir -p "$out"
lib=$PWD/build/lib/libgpuslice.so
if [ ! -f "$lib" ]; then
  : > "$out/nvml-build.log"
  tests/gpu/build_release.sh "$out/nvml-build.log" gpuslice_preload || { echo "FAIL build"; exit 1; }
fi
work=$(mktemp -d)
jobs_started=()
trap 'kill "${jobs_started[@]}" $pid_a $pid_b 2>/dev/null; rm -rf "$work"' EXIT
pid_a="" pid_b=""

# The tenants' environments: the caller's, without any gpuslice setting of its own.
unset_args=(-u LD_PRELOAD)
for v in $(compgen -e | grep '^GPUSLICE_'); do unset_args+=(-u "$v"); done
clean_env() { env "${unset_args[@]}" "$@"; }
in_a() { clean_env LD_PRELOAD="$lib" GPUSLICE_SHARED_DIR="$work/a" GPUSLICE_MEMORY_LIMIT=8Gi CUDA_VISIBLE_DEVICES=0 "$@"; }
in_b() { clean_env LD_PRELOAD="$lib" GPUSLICE_SHARED_DIR="$work/b" GPUSLICE_MEMORY_LIMIT=4Gi CUDA_VISIBLE_DEVICES=0 "$@"; }

worker='import os, sys, time, torch
hold = torch.empty(int(sys.argv[1]) << 20, dtype=torch.uint8, device="cuda")
a = torch.randn(4096, 4096, device="cuda")
torch.cuda.synchronize()
print("ready", os.getpid(), flush=True)
end = time.time() + float(sys.argv[2])
while time.time() < end:
    if sys.argv[3] == "busy":
        for _ in range(20):
            a = torch.tanh(a @ a)
        torch.cuda.synchronize()
    else:
        time.sleep(0.05)'
in_a python3 -c "$worker" 1024 40 busy > "$out/nvml-worker-a.txt" 2>&1 &
jobs_started+=($!)
in_b python3 -c "$worker" 512 40 idle > "$out/nvml-worker-b.txt" 2>&1 &
jobs_started+=($!)
for _ in $(seq 150); do  # 30 s at most (torch import and CUDA start take a few)
  grep -q ready "$out/nvml-worker-a.txt" && grep -q ready "$out/nvml-worker-b.txt" && break
  sleep 0.2
done
if ! grep -q ready "$out/nvml-worker-a.txt" || ! grep -q ready "$out/nvml-worker-b.txt"; then
  tail -5 "$out"/nvml-worker-*.txt
  echo "FAIL workers did not start"
  exit 1
fi
# The workers' own pids, as NVML lists them (no PID namespace on the device machine).
pid_a=$(awk '/^ready/ {print $2; exit}' "$out/nvml-worker-a.txt")
pid_b=$(awk '/^ready/ {print $2; exit}' "$out/nvml-worker-b.txt")
sleep 2  # a couple of sampling periods of A's work

# shellcheck disable=SC2054  # the commas belong to nvidia-smi's arguments
smi_gpu=(--query-gpu=memory.total,memory.used,memory.free,utilization.gpu --format=csv,noheader,nounits -i 0)
# shellcheck disable=SC2054
smi_apps=(--query-compute-apps=pid,used_memory --format=csv,noheader,nounits -i 0)
for who in host a b; do
  case $who in host) run=clean_env ;; a) run=in_a ;; b) run=in_b ;; esac
  smi() { $run timeout 8 nvidia-smi "$@"; }  # a hung query must not blow the time budget
  {
    smi > "$out/nvml-smi-$who.txt"
    smi "${smi_apps[@]}" > "$out/nvml-apps-$who.txt"
    smi "${smi_gpu[@]}" > "$out/nvml-gpu-$who.txt"
    smi -q -d MEMORY,UTILIZATION -i 0 > "$out/nvml-q-$who.txt"
  } 2> "$out/nvml-stderr-$who.txt"
done

fails=0
check() {  # check NAME CONDITION-EXIT-STATUS DETAIL
  if [ "$2" = 0 ]; then echo "PASS $1 ($3)"; else echo "FAIL $1 ($3)"; fails=$((fails + 1)); fi
}
pids_of() { cut -d, -f1 "$out/nvml-apps-$1.txt" | tr -d ' ' | grep -E '^[0-9]+$' | sort -n | tr '\n' ' ' | sed 's/ $//'; }
# Field $2 of the first CSV line of nvidia-smi's GPU query in view $1: a number, "N/A" or empty.
field() {
  local v
  v=$(grep -E '^ *[0-9]' "$out/nvml-gpu-$1.txt" | head -1 | cut -d, -f"$2" | tr -d ' []')
  case $v in '' | *[!0-9]*) echo "${v:-none}" ;; *) echo "$v" ;; esac
}
num() { case $1 in '' | *[!0-9]*) return 1 ;; esac; }
host_pids=$(pids_of host) a_pids=$(pids_of a) b_pids=$(pids_of b)
both=$(printf '%s\n%s\n' "$pid_a" "$pid_b" | sort -n | tr '\n' ' ' | sed 's/ $//')
{
  # The host view must show both tenants, or the checks below prove nothing.
  r=1
  case " $host_pids " in *" $pid_a "*) case " $host_pids " in *" $pid_b "*) r=0 ;; esac ;; esac
  check "host lists both tenants" $r "host: $host_pids; tenants: $both"
  [ "$a_pids" = "$pid_a" ]; check "A's compute-apps is A alone" $? "A sees: '$a_pids', A is $pid_a"
  [ "$b_pids" = "$pid_b" ]; check "B's compute-apps is B alone" $? "B sees: '$b_pids', B is $pid_b"
  ! grep -qw "$pid_b" "$out/nvml-smi-a.txt"; check "A's nvidia-smi never names B's pid" $? "nvml-smi-a.txt"
  ! grep -qw "$pid_a" "$out/nvml-smi-b.txt"; check "B's nvidia-smi never names A's pid" $? "nvml-smi-b.txt"
  [ "$(field a 1)" = 8192 ]; check "A's memory.total is its 8Gi quota" $? "$(head -1 "$out/nvml-gpu-a.txt")"
  [ "$(field b 1)" = 4096 ]; check "B's memory.total is its 4Gi quota" $? "$(head -1 "$out/nvml-gpu-b.txt")"
  num "$(field host 1)" && [ "$(field host 1)" -gt 8192 ]
  check "host memory.total is the card's" $? "$(head -1 "$out/nvml-gpu-host.txt")"
  for who in a b; do
    t=$(field $who 1) u=$(field $who 2) f=$(field $who 3)
    num "$t" && num "$u" && num "$f" && [ $((u + f)) -le "$t" ] && [ $((t - u - f)) -le 1 ]
    check "$who: used + free = total (MiB rounding)" $? "total $t used $u free $f"
    bar1=$(sed -n '/BAR1 Memory Usage/,/Free/ s/^ *Total *: *\([0-9]*\) MiB/\1/p' "$out/nvml-q-$who.txt" | head -1)
    num "$bar1" && num "$t" && [ "$bar1" -le "$t" ]
    check "$who: BAR1 total within the quota" $? "BAR1 total '$bar1' MiB"
  done
  ug_host=$(field host 4) ug_a=$(field a 4) ug_b=$(field b 4)
  num "$ug_host" && [ "$ug_host" -ge 50 ]
  check "host GPU-Util shows A's load" $? "host ${ug_host}%"
  num "$ug_b" && [ "$ug_b" -le 5 ]
  check "idle B's GPU-Util is its own (about 0)" $? "B ${ug_b}% while the card is at ${ug_host}%"
  num "$ug_a" && [ "$ug_a" -ge 30 ]
  check "busy A's GPU-Util shows its own work" $? "A ${ug_a}%"
  echo "nvml view: $fails failed (${SECONDS}s)"
} 2>&1 | tee "$out/nvml-view.txt"
grep -q "nvml view: 0 failed" "$out/nvml-view.txt"
