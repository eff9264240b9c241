#!/usr/bin/env bash
# What this tree's hooks cost against another tree's, on one GPU: bench/gpu/launch_ab.cu (hooked −
# bypassed in one process, ABBA and call-by-call interleaved) under each tree's libgpuslice-ab.so in
# turn, ROUNDS alternations (old, new, new, old, ...) so drift falls on both, per configuration.
# Prints each run's added cost per launch and per 1 MiB alloc+free pair (interleaved blocks, mean
# and median call) and, per configuration, the mean of new − old with its spread.
#
#   bench/gpu/launch_ab_trees.sh OLD_SOURCE_DIR [ROUNDS=3]
#
# AB_COMPUTE_LIMIT (default 100): the quota+compute configuration's GPUSLICE_COMPUTE_LIMIT; below 100
# the limiter's windows run (launch_ab's empty kernels keep far below any limit, so nothing is held).
#
# OLD_SOURCE_DIR: the other tree's sources (e.g. `git archive <commit> src cmake CMakeLists.txt`
# unpacked into an ignored folder carried to the GPU machine). Builds both trees' A/B library
# (Release) and this tree's launch_ab. Logs under $OUT/launch-ab-trees/.
set -uo pipefail
cd "$(dirname "$0")/../.."
old_src=${1:?usage: $0 OLD_SOURCE_DIR [ROUNDS]}
rounds=${2:-3}
out=${OUT:-gpu-out}/launch-ab-trees
mkdir -p "$out"
tests/gpu/build_release.sh "$out/build.log" gpuslice_preload_ab || exit 1
tests/gpu/build_release.sh -S "$old_src" -B /tmp/ab-old-build "$out/build.log" gpuslice_preload_ab || exit 1
mkdir -p build/gpu
nvcc -O2 -arch=sm_90 -o build/gpu/launch_ab bench/gpu/launch_ab.cu -ldl >>"$out/build.log" 2>&1 ||
  { tail -20 "$out/build.log"; exit 1; }
declare -A lib=([old]=/tmp/ab-old-build/lib/libgpuslice-ab.so [new]=$PWD/build/lib/libgpuslice-ab.so)
cpu=${AB_CPU:-4} n=${AB_ROUNDS:-200}
configs=("quota" "quota+compute")
run_one() {  # tree config round
  local env=(GPUSLICE_MEMORY_LIMIT=60Gi GPUSLICE_SHARED_DIR="$(mktemp -d)")
  [ "$2" = "quota+compute" ] && env+=(GPUSLICE_COMPUTE_LIMIT="${AB_COMPUTE_LIMIT:-100}")
  taskset -c "$cpu" env LD_PRELOAD="${lib[$1]}" "${env[@]}" build/gpu/launch_ab "$n" >"$out/$2-$1-r$3.txt" 2>&1
}
for r in $(seq 1 "$rounds"); do
  order=(old new)
  [ $((r % 2)) = 0 ] && order=(new old)
  for c in "${configs[@]}"; do
    for t in "${order[@]}"; do run_one "$t" "$c" "$r"; done
  done
done
python3 - "$out" "$rounds" <<'EOF'
import re, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def added(path, name):
    text = open(path).read()
    if "errors=0" not in text:
        return None
    m = re.search(rf"^{name}\s+hooked_ns=\S+ bypassed_ns=\S+ added_ns=(\S+) .*median_call: .* added_ns=(\S+) ", text, re.M)
    return (float(m.group(1)), float(m.group(2))) if m else None
print("added cost over the bypassed driver call, ns (interleaved blocks: mean call / median call)")
for c in ("quota", "quota+compute"):
    for name, what in (("launch_x", "launch"), ("alloc_free_x", "1 MiB alloc+free")):
        diffs = []
        for r in range(1, rounds + 1):
            o, n = (added(f"{out}/{c}-{t}-r{r}.txt", name) for t in ("old", "new"))
            if o and n:
                diffs.append((n[0] - o[0], n[1] - o[1]))
                print(f"  {c:14s} {what:17s} round {r}: old {o[0]:+7.1f} / {o[1]:+7.1f}   new {n[0]:+7.1f} / {n[1]:+7.1f}")
            else:
                print(f"  {c:14s} {what:17s} round {r}: a run failed (see its file)")
        if diffs:
            mean = [statistics.mean(d[i] for d in diffs) for i in (0, 1)]
            print(f"{c:14s} {what:17s} new - old: mean call {mean[0]:+.1f} ns "
                  f"[{min(d[0] for d in diffs):+.1f}, {max(d[0] for d in diffs):+.1f}], median call {mean[1]:+.1f} ns "
                  f"[{min(d[1] for d in diffs):+.1f}, {max(d[1] for d in diffs):+.1f}] over {len(diffs)} rounds")
EOF
