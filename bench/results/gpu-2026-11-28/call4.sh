#!/usr/bin/env bash
# Device call 4 (2026-11-28, a 4-GPU machine): the compute limit's GPU time read from the driver's
# own utilization samples (compute_accuracy.py's "GPU time %" column) for the shapes whose clock
# moves (GPU 1: graph, compile; GPU 2: streams4, matmul2p) and those whose clock does not (GPU 3:
# cluster, long40); on GPU 0 the decode loop under 20% and 30% in short phases between unlimited
# ones, pooled per limit (a host's drift over seconds cancels).
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=$OUT/build tests/gpu/run.sh none > /dev/null 2>&1 || { echo build failed; tail -30 $OUT/build/build.log; exit 1; }
cat $OUT/build/env.txt
acc() {  # name gpu cpus workloads [schedule] [seconds]
  CUDA_VISIBLE_DEVICES=$2 python3 bench/gpu/compute_accuracy.py --lib build/lib/libgpuslice.so --out $OUT/acc-$1 \
    --seconds ${6:-3} --warmup 8 --cpus $3 --schedule ${5:-100,20,100,30,100,50,100,80,100} \
    --workloads $4 > $OUT/acc-$1.txt 2>&1; echo "acc-$1: exit $?"
}
acc decode 0 2 decode 100,30,100,20,100,30,100,20,100,30,100,20,100 2 &
acc g 1 18 graph,compile &
acc s 2 34-37 streams4,matmul2p &
acc c 3 50 cluster,long40 &
wait
for x in decode g s c; do
  echo "== accuracy $x"; grep -E "^\| |phases pass|timed|rror|^[a-z0-9]+:$|pooled" $OUT/acc-$x.txt | head -40
done
