#!/usr/bin/env bash
# Device call 3 (2026-11-28, second session; a 2-GPU machine), the same tree as call 2 with nothing
# else on the host: GPU 0 the decode loop under 20/30/50% in three short phases each between
# unlimited ones, pooled per limit; GPU 1 streams4 twice (its 30% phase fell 5.5 points short by
# kernel time in call 2, 1.9 in call 1), with its kernels' device timestamps.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=$OUT/build tests/gpu/run.sh none > /dev/null 2>&1 || { echo build failed; tail -30 $OUT/build/build.log; exit 1; }
cat $OUT/build/env.txt
acc() {  # name gpu cpus workloads [schedule] [seconds] [extra]
  CUDA_VISIBLE_DEVICES=$2 python3 bench/gpu/compute_accuracy.py --lib build/lib/libgpuslice.so --out $OUT/acc-$1 \
    --seconds ${6:-3} --warmup 8 --cpus $3 --schedule ${5:-100,20,100,30,100,50,100,80,100} \
    --workloads $4 ${7:-} > $OUT/acc-$1.txt 2>&1; echo "acc-$1: exit $?"
}
kt="--kernel-timeline build/gpu/libkernel_timeline.so"
acc decode 0 2 decode 100,20,100,30,100,50,100,20,100,30,100,50,100,20,100,30,100,50,100 2 &
{ acc s1 1 18-21 streams4 "" 3 "$kt"; acc s2 1 18-21 streams4 "" 3 "$kt"; } &
wait
for x in decode s1 s2; do
  echo "== accuracy $x"; grep -E "^\| |phases pass|timed|rror|^[a-z0-9]+:$|pooled|Traceback|base:" $OUT/acc-$x.txt | head -45
done
mkdir -p $OUT/keep
for x in decode s1 s2; do cp $OUT/acc-$x.txt $OUT/keep/; gzip -c $OUT/acc-$x/compute_accuracy.json > $OUT/keep/acc-$x.json.gz; done
rm -rf $OUT/build $OUT/acc-decode $OUT/acc-s1 $OUT/acc-s2 $OUT/acc-*.txt
