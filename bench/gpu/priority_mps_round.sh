#!/usr/bin/env bash
# Priority sharing under MPS against time slices, one device call per scenario (docs/priority.md,
# "Which mode to pick"): builds gpuslice, then runs bench/gpu/priority_bench.py --paired for the
# scenario twice side by side, time-sliced on the first GPU and under an MPS control daemon started
# for the run (--mps) on the second, each un-managed and with gpuslice priorities, each with the
# trainer beside an idle high tenant first. Logs and JSON under $OUT/<scenario>-<mode>/.
#   bench/gpu/priority_mps_round.sh req2ms   2 ms requests (4 x 256 tokens) at 30% load  (~5 min)
#   bench/gpu/priority_mps_round.sh req7ms   7 ms requests at 30% and 60% load           (~8 min)
# SECONDS_PER (default 25), ALONE_SECONDS (default 10), PRIORITY_ARGS (extra arguments for both
# modes), MPS_ARGS (for the MPS run only, e.g. "--mps-low-threads 50"), MODES (default
# "timesliced mps"; one of them alone fits a 10-minute call on one GPU). One GPU: the modes run one
# after the other (twice as long).
set -uo pipefail
cd "$(dirname "$0")/../.."
scenario=${1:-req2ms}
case "$scenario" in
  req2ms) args=(--paired --loads 30 --server-batch 4 --server-tokens 256) ;;
  req7ms) args=(--paired --loads 30,60) ;;
  *) echo "usage: $0 req2ms|req7ms" >&2; exit 2 ;;
esac
out=${OUT:-priority-mps-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
{
  nvidia-smi -L; nvidia-smi --query-gpu=driver_version,memory.total,compute_mode --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
  command -v nvidia-cuda-mps-control || echo "no nvidia-cuda-mps-control"
} 2>&1 | tee "$out/env.txt"
: > "$out/build.log"
tests/gpu/build_release.sh "$out/build.log" gpuslice_preload gpuslice_cli || exit 1
echo "build ok"
gpus=$(nvidia-smi -L | wc -l)
bench=(python3 bench/gpu/priority_bench.py --lib build/lib/libgpuslice.so --cli build/bin/gpuslice
       --seconds "${SECONDS_PER:-25}" --alone-seconds "${ALONE_SECONDS:-10}")
run() {  # mode gpu cpu-offset extra...
  local mode=$1 gpu=$2 offset=$3
  shift 3
  local dir="$out/$scenario-$mode"
  mkdir -p "$dir"
  CUDA_VISIBLE_DEVICES=$gpu "${bench[@]}" --out "$dir" --cpu-offset "$offset" "${args[@]}" "$@" \
    ${PRIORITY_ARGS:-} > "$dir/log.txt" 2>&1
  echo "$scenario-$mode: exit $?"
}
modes=${MODES:-timesliced mps}
run_mode() {  # mode gpu cpu-offset
  case "$1" in
    timesliced) run timesliced "$2" "$3" ;;
    mps) run mps "$2" "$3" --mps ${MPS_ARGS:-} ;;
  esac
}
if [ "$gpus" -ge 2 ] && [ "$modes" = "timesliced mps" ]; then
  run_mode timesliced 0 0 &
  run_mode mps 1 8 &
  wait
else
  for mode in $modes; do run_mode "$mode" 0 0; done
fi
echo
echo "== $scenario (goals, issue 41: MPS 2 ms p99 <= 1.10x alone, trainer >= 0.6x; 7 ms p99 <= 1.05x,"
echo "   trainer >= 0.6x at 30% / 0.35x at 60%; beside an idle high tenant >= 0.97x, both modes)"
for mode in $modes; do
  echo "-- $scenario-$mode"
  grep -iE "goal|p99|trainer|un-managed|unmanaged|priorit|idle high|MPS" "$out/$scenario-$mode/log.txt" | tail -n 30
done
