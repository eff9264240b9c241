#!/usr/bin/env bash
# Device call 1 (2026-11-28, second session; a 2-GPU machine): the compute limit on the busy probe
# that times every s-th launch of long windows. GPU 0: the decode loop under 20% and 30% in short
# phases between unlimited ones, pooled per limit; then graph, compile, mix. GPU 1: streams4,
# matmul2p, cluster, long40. The shapes also record their kernels' device timestamps (CUPTI,
# --kernel-timeline), so each phase is judged by its GPU time as well as by its throughput.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=$OUT/build tests/gpu/run.sh none > /dev/null 2>&1 || { echo build failed; tail -30 $OUT/build/build.log; exit 1; }
cat $OUT/build/env.txt; grep -i "kernel timeline" $OUT/build/build.log
acc() {  # name gpu cpus workloads [schedule] [seconds] [extra]
  CUDA_VISIBLE_DEVICES=$2 python3 bench/gpu/compute_accuracy.py --lib build/lib/libgpuslice.so --out $OUT/acc-$1 \
    --seconds ${6:-3} --warmup 8 --cpus $3 --schedule ${5:-100,20,100,30,100,50,100,80,100} \
    --workloads $4 ${7:-} > $OUT/acc-$1.txt 2>&1; echo "acc-$1: exit $?"
}
kt="--kernel-timeline build/gpu/libkernel_timeline.so"
{ acc decode 0 2 decode 100,30,100,20,100,30,100,20,100,30,100,20,100 2
  acc g 0 2-5 graph,compile,mix "" 3 "$kt"; } &
acc s 1 18-21 streams4,matmul2p,cluster,long40 "" 3 "$kt" &
wait
for x in decode g s; do
  echo "== accuracy $x"; grep -E "^\| |phases pass|timed|rror|^[a-z0-9]+:$|pooled|Traceback" $OUT/acc-$x.txt | head -45
done
mkdir -p $OUT/keep
for x in decode g s; do cp $OUT/acc-$x.txt $OUT/keep/; gzip -c $OUT/acc-$x/compute_accuracy.json > $OUT/keep/acc-$x.json.gz; done
rm -rf $OUT/build $OUT/acc-decode $OUT/acc-g $OUT/acc-s $OUT/acc-*.txt
