#!/usr/bin/env bash
# One device call for priority sharing's goals (docs/priority.md), paired design: builds gpuslice,
# then runs bench/gpu/priority_bench.py three ways, side by side on three GPUs when there are (one
# after the other on one GPU otherwise):
#   req7ms  the GPT-2 server replaying 7 ms graph requests at 30% and 60% load (--paired)
#   req2ms  2 ms requests (4 x 256 tokens, graph replay) at 30% load (--paired)
#   eager   the server launching kernel by kernel (host-bound, GPU < 10% busy) at 60% load, all
#           five configurations: the trainer beside it with priorities against un-managed
# Logs and JSON under $OUT/<run>/; the summary (each run's goal lines) at the end.
#   bench/gpu/priority_round.sh            (SECONDS_PER=25 by default; PRIORITY_ARGS: extra arguments)
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-priority-round-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
{
  nvidia-smi -L; nvidia-smi --query-gpu=driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
} 2>&1 | tee "$out/env.txt"
: > "$out/build.log"
tests/gpu/build_release.sh "$out/build.log" gpuslice_preload gpuslice_cli || exit 1
echo "build ok"
gpus=$(nvidia-smi -L | wc -l)
seconds=${SECONDS_PER:-25}
bench=(python3 bench/gpu/priority_bench.py --lib build/lib/libgpuslice.so --cli build/bin/gpuslice
       --seconds "$seconds")
run() {  # name gpu args...
  local name=$1 gpu=$2
  shift 2
  mkdir -p "$out/$name"
  CUDA_VISIBLE_DEVICES=$gpu "${bench[@]}" --out "$out/$name" "$@" ${PRIORITY_ARGS:-} > "$out/$name/log.txt" 2>&1
  echo "$name: exit $?"
}
if [ "$gpus" -ge 3 ]; then
  run req7ms 0 --paired --loads 30,60 &
  run req2ms 1 --paired --loads 30 --server-batch 4 --server-tokens 256 &
  run eager 2 --loads 60 --server-eager &
  wait
else
  run req7ms 0 --paired --loads 30,60
  run req2ms 0 --paired --loads 30 --server-batch 4 --server-tokens 256
  run eager 0 --loads 60 --server-eager
fi
echo
echo "== summary (goals: p99 <= 1.10x alone for 7 ms and 2 ms requests, trainer >= 0.5x at 30% and"
echo "   >= 0.25x at 60%; beside the eager server the trainer with priorities >= 0.8x of un-managed)"
for name in req7ms req2ms eager; do
  echo "-- $name"
  grep -iE "goal|p99|trainer|un-managed|unmanaged|priorit" "$out/$name/log.txt" | tail -n 25
done
