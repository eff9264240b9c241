#!/usr/bin/env bash
# Accuracy of the compute limit by GPU time (time-sliced, no MPS) on a few shapes, one device call on
# one H200 (docs/compute-limiter.md, "Throughput vs occupancy"): builds gpuslice, then runs
# bench/gpu/compute_accuracy.py with phases of SECONDS_PER (3 s) measured after SETTLE (0.4 s):
#   1. SHAPES (default graph,graph2p,mix) through 20/30/50/80%, ALTERNATIONS (3) times, each limited
#      phase between unlimited ones (ratio = rate limited / mean of the unlimited phases just before
#      and after, in the same process);
#   2. graph2p (two processes of one container) started under 40%, and again under 70%: the first 1 s
#      window of the pair's first phase (from its first second under the limit after a 1 s warm-up),
#      then an unlimited phase and the same limit set live (its first 1 s window includes the queue
#      left from the unlimited phase, which runs uncharged: docs/compute-limiter.md, live changes).
# and prints per shape x limit: mean ratio, spread (min..max over the alternations), points off the
# limit, the first 1 s window's ratio (mean and min..max) and the SM clock limited (unlimited); and
# the limiter's exit lines (windows charged for the clock). Logs and JSON under $OUT/compute-accuracy/.
#
#   bench/gpu/compute_accuracy_round.sh           about 330 s after the build (estimated: 3.4 s per
#                                                 phase; 25 phases per shape of part 1, 4 per run of
#                                                 part 2; about 10 s to start each of the 5 runs)
#   bench/gpu/compute_accuracy_round.sh --help
#
# SHAPES (none: skip part 1), ALTERNATIONS, SECONDS_PER, SETTLE, TWO_PROCESS_LIMITS (default "40 70"; empty: skip part 2),
# SKIP_BUILD (set: use build/ as it is),
# ACCURACY_ARGS (more arguments for compute_accuracy.py, e.g. --kernel-timeline build/gpu/libkernel_timeline.so).
set -uo pipefail
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi
cd "$(dirname "$0")/../.."
out=${OUT:-compute-accuracy-out}/compute-accuracy
mkdir -p "$out"
export PYTHONUNBUFFERED=1
began=$(date +%s)
{
  nvidia-smi -L; nvidia-smi --query-gpu=driver_version,clocks.max.sm,clocks.applications.graphics,power.limit --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
  git log --oneline -1 2>/dev/null
} 2>&1 | tee "$out/env.txt"
if [ -z "${SKIP_BUILD:-}" ]; then
  : > "$out/build.log"
  tests/gpu/build_release.sh "$out/build.log" gpuslice_preload gpuslice_cli || exit 1
  echo "build ok ($(($(date +%s) - began)) s)"
fi
measured=$(date +%s)

alternations=${ALTERNATIONS:-3}
schedule=100
for _ in $(seq "$alternations"); do schedule+=",20,100,30,100,50,100,80,100"; done
accuracy=(python3 bench/gpu/compute_accuracy.py --lib build/lib/libgpuslice.so --cli build/bin/gpuslice
          --seconds "${SECONDS_PER:-3}" --settle "${SETTLE:-0.4}" --warmup 1 --no-unhooked)
runs=()
run() {  # run NAME WORKLOADS SCHEDULE
  local name=$1 start
  start=$(date +%s)
  mkdir -p "$out/$name"
  "${accuracy[@]}" --out "$out/$name" --workloads "$2" --schedule "$3" ${ACCURACY_ARGS:-} \
    > "$out/$name/log.txt" 2>&1 || true  # a FAIL verdict exits 1; the table says it
  echo "$name: $(tail -n 1 "$out/$name/log.txt") ($(($(date +%s) - start)) s)"
  [ -f "$out/$name/compute_accuracy.json" ] && runs+=("$out/$name/compute_accuracy.json")
}
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
[ "${SHAPES:-}" = none ] || run shapes "${SHAPES:-graph,graph2p,mix}" "$schedule"
# Two processes started under each limit (their first phase: the first 1 s window is the pair's
# first second under it after the 1 s warm-up), then that limit again after an unlimited phase, set
# live (its first 1 s window also runs the queue left from the unlimited phase, uncharged).
n=0
for l in ${TWO_PROCESS_LIMITS-40 70}; do  # a limit may repeat: each run its own directory
  n=$((n + 1))
  run "graph2p-$l-$n" "graph2p" "$l,100,$l,100"
done

echo
echo "== per shape x limit (${SECONDS_PER:-3} s measured per phase; ratio = limited / unlimited neighbours)"
python3 - "${runs[@]}" <<'PY' | tee "$out/table.md"
import json, sys
cells = {}
for path in sys.argv[1:]:
    for r in json.load(open(path))["rows"]:
        shape = r["workload"] + (" (started limited)" if r.get("after_limit") == "start" else "")
        cells.setdefault((shape, r["limit"]), []).append(r)
print("| shape | limit % | phases | ratio mean | spread | points off | first 1 s mean [min..max] | 1 s windows min..max | SM MHz (unlimited) |")
print("|---|---|---|---|---|---|---|---|---|")
worst = 0.0
for (shape, limit), rs in sorted(cells.items()):
    ratios = [r["ratio"] for r in rs]
    mean = sum(ratios) / len(ratios)
    expected = sum(r.get("expected_ratio", limit / 100) for r in rs) / len(rs)
    off = (mean - expected) * 100
    worst = max(worst, abs(off))
    first = [r["first_1s_ratio"] for r in rs if r.get("first_1s_ratio") is not None]
    first_cell = f"{sum(first) / len(first):.3f} [{min(first):.3f}..{max(first):.3f}]" if first else "-"
    lo = [r["min_1s_ratio"] for r in rs if r.get("min_1s_ratio") is not None]
    hi = [r["max_1s_ratio"] for r in rs if r.get("max_1s_ratio") is not None]
    win = f"{min(lo):.3f}..{max(hi):.3f}" if lo and hi else "-"
    mhz = [r["sm_mhz"] for r in rs if r.get("sm_mhz")]
    base = [r["unlimited_sm_mhz"] for r in rs if r.get("unlimited_sm_mhz")]
    clock = f"{sum(mhz) / len(mhz):.0f} ({sum(base) / len(base):.0f})" if mhz and base else "-"
    print(f"| {shape} | {limit} | {len(rs)} | {mean:.3f} | {min(ratios):.3f}..{max(ratios):.3f} | {off:+.1f} | "
          f"{first_cell} | {win} | {clock} |")
print(f"\nworst mean: {worst:.1f} points off ({'within' if worst <= 2 else 'outside'} +-2)")
print("first 1 s: the window from the `gpuslice set` (a live change: the unlimited phase's queue runs first,"
      " uncharged), or, started limited, the first second after the 1 s warm-up (no flat-out clock known yet:"
      " the reference is estimated: the second lowest busy clock)")
PY
echo
echo "== the limiter's exit lines (windows charged above their GPU time for the SM clock)"
grep -h "compute limiter, device" "$out"/*/logs/*.log 2>/dev/null | sed 's/^\[gpuslice [0-9]*\] //' | head -n 12
echo "measured $(($(date +%s) - measured)) s, total $(($(date +%s) - began)) s"
