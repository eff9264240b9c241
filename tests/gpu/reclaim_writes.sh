#!/usr/bin/env bash
# Memsets, 2D/3D copies and peer copies while borrowed memory moves (docs/quota.md, "Guarantees and
# borrowing"), on the real driver; logs in $OUT/reclaim_writes/; a verdict table at the end.
#  paths: tests/gpu/memset_paths.cu under libgpuslice.so, its buffers borrowed (a guarantee below
#    them) and the profiler on: every runtime path writes what it should, and the profile's
#    metrics.log names the hooks they reached (cuMemset, cuMemsetAsync, cuMemcpy2D(Async),
#    cuMemcpy3D(Async), cuMemcpyPeer(Async)).
#  moves: tests/e2e/reclaim_app.cpp's roles on GPU 0: a filler holds most of the device; a writer
#    borrows 12 x 1 GiB and rewrites all of it, pass after pass, by the 26 memset, copy and stream
#    memory operation kinds the library holds during a move (1 MiB stripes; every pass read back);
#    an asker within its guarantee then takes 20 GiB, so part of the writer's memory moves to host
#    memory, and back once the asker freed it. Every write must read back as written; the writer's status shows the episode.
#   tests/gpu/reclaim_writes.sh   (about 2 minutes)
# UNIT_MIB (default 1024) scales the moves part: allocations of one unit, stripes of unit/1024 MiB.
set -u
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:-gpu-out}/reclaim_writes
mkdir -p "$out" build/gpu
tests/gpu/build_release.sh "$out/build.log" gpuslice_preload gpuslice_cli || { echo "FAIL build"; exit 1; }
{ nvcc -O2 -std=c++17 -arch=sm_90 -o build/gpu/memset_paths tests/gpu/memset_paths.cu &&
  nvcc -O2 -std=c++17 -Isrc -o build/gpu/reclaim_app tests/e2e/reclaim_app.cpp -lcuda; } >> "$out/build.log" 2>&1 ||
  { tail -20 "$out/build.log"; exit 1; }
lib=$PWD/build/lib/libgpuslice.so
cli=$PWD/build/bin/gpuslice
app=$PWD/build/gpu/reclaim_app
work=$(mktemp -d)
trap 'touch "$work/stop"; sleep 2; rm -rf "$work"' EXIT
mkdir -m 700 "$work/node" "$work/profile"
nvidia-smi -i 0 --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.txt" 2>&1
total_mib=$(nvidia-smi -i 0 --query-gpu=memory.total --format=csv,noheader,nounits | head -1)

# The environment of container NAME with LIMIT and GUARANTEE (sizes as GPUSLICE_MEMORY_LIMIT takes),
# into the array `envs`.
container() {
  envs=("LD_PRELOAD=$lib" "GPUSLICE_SHARED_DIR=$work/$1" "GPUSLICE_NODE_DIR=$work/node" "GPUSLICE_MEMORY_LIMIT=$2"
    "GPUSLICE_MEMORY_GUARANTEE=$3" GPUSLICE_LOG_LEVEL=info CUDA_VISIBLE_DEVICES=0)
}
# Waits up to SECONDS for TEXT in FILE.
wait_for() {
  for _ in $(seq $(($3 * 10))); do grep -q "$1" "$2" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}
value() { grep -oE "^$1=[-0-9]+" "$2" 2>/dev/null | tail -1 | cut -d= -f2; }

# paths
container paths 8Gi 64Mi
env "${envs[@]}" GPUSLICE_PROFILE_DIR="$work/profile" build/gpu/memset_paths 256 \
  > "$out/paths.log" 2>&1
paths_rc=$?
cp "$work/profile/metrics.log" "$out/metrics.log" 2>/dev/null
missing=""
for name in cuMemset cuMemsetAsync cuMemcpy2D cuMemcpy2DAsync cuMemcpy3D cuMemcpy3DAsync cuMemcpyPeer \
  cuMemcpyPeerAsync; do
  grep -qx "name:$name" "$out/metrics.log" 2>/dev/null || missing="$missing $name"
done

# moves, in units of UNIT_MIB
unit=${UNIT_MIB:-1024}
borrow=12
free=16  # left free before the asker comes, contexts included
filler=$((total_mib / unit - borrow - free))
container filler $(((filler + 2) * unit))Mi $(((filler + 2) * unit))Mi
env "${envs[@]}" "$app" filler --count "$filler" --mib "$unit" --seconds 300 --stop-file "$work/stop" > "$out/filler.log" 2>&1 &
wait_for filled= "$out/filler.log" 120 || echo "filler did not fill: $(tail -3 "$out/filler.log")"
container writer "${total_mib}Mi" "${unit}Mi"
env "${envs[@]}" GPUSLICE_LOG_LEVEL=debug "$app" writer --count "$borrow" \
  --mib "$unit" --stripe-kib "$unit" --seconds 240 --stop-file "$work/stop" > "$out/writer.log" 2>&1 &
writer_pid=$!
wait_for allocated= "$out/writer.log" 120 || echo "writer did not allocate: $(tail -3 "$out/writer.log")"
sleep 5
container asker $((24 * unit))Mi $((24 * unit))Mi
env "${envs[@]}" GPUSLICE_RECLAIM_DEADLINE=10s "$app" asker --mib $((20 * unit)) --hold-ms 3000 \
  > "$out/asker.log" 2>&1
sleep 5  # the restore
"$cli" status --json --shared-dir "$work/writer" > "$out/writer-status.json" 2>&1
touch "$work/stop"
wait "$writer_pid"
wait
episodes=$(grep -oE '"reclaim_episodes":[0-9]+' "$out/writer-status.json" | head -1 | cut -d: -f2)
on_host=$(grep -oE '"on_host_bytes":[0-9]+' "$out/writer-status.json" | head -1 | cut -d: -f2)
grep -E "reclaim: moved" "$out/writer.log" > "$out/moves.txt"

printf '%-6s %-6s %s\n' part result details
verdict=PASS
[ "$paths_rc" = 0 ] && [ -z "$missing" ] || verdict=FAIL
printf '%-6s %-6s %s\n' paths "$verdict" "exit=$paths_rc failures=$(value failures "$out/paths.log") not-hooked:${missing:- none}"
grep '^FAIL' "$out/paths.log" | sed 's/^/    /'
moves=PASS
for check in "ask_code:$(value ask_code "$out/asker.log"):0" "ask_identical:$(value ask_identical "$out/asker.log"):1" \
  "kinds:$(value kinds "$out/writer.log"):26" "failed:$(value failed "$out/writer.log"):0" \
  "mismatches:$(value mismatches "$out/writer.log"):0" "final_mismatches:$(value final_mismatches "$out/writer.log"):0" \
  "on_host_bytes:$on_host:0"; do
  IFS=: read -r name got want <<< "$check"
  [ "$got" = "$want" ] || { moves=FAIL; echo "    $name=$got (want $want)"; }
done
[ "${episodes:-0}" -ge 1 ] || { moves=FAIL; echo "    no reclaim episode"; }
printf '%-6s %-6s %s\n' moves "$moves" "writes=$(value writes "$out/writer.log") episodes=${episodes:-?} \
ask_ms=$(value ask_ms "$out/asker.log") moves_logged=$(wc -l < "$out/moves.txt")"
sed 's/^/    /' "$out/moves.txt"
[ "$verdict" = PASS ] && [ "$moves" = PASS ]
