#!/usr/bin/env bash
# Device call 1 of 2026-11-29 (one H200): 2 ms requests at 30% load under an MPS daemon, the
# library's gate against the MPS server's own client priority (un-managed and under gpuslice with
# GPUSLICE_MPS_PRIORITY=server), with and without SMs reserved (active threads 70%), and a 1 ms bound.
set -uo pipefail
R=$OUT; W=/tmp/c1; mkdir -p $W
um="GPUSLICE_BENCH_UNMANAGED=1"
export MODES=mps SECONDS_PER=15 ALONE_SECONDS=8
export PRIORITY_ARGS="--variant t1ms;trainer:GPUSLICE_PRIORITY_IN_FLIGHT=1ms \
--variant cp;server:$um,CUDA_MPS_CLIENT_PRIORITY=0;trainer:$um,CUDA_MPS_CLIENT_PRIORITY=1 \
--variant cpt70;server:$um,CUDA_MPS_CLIENT_PRIORITY=0;trainer:$um,CUDA_MPS_CLIENT_PRIORITY=1,CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=70 \
--variant server;trainer:GPUSLICE_BENCH_LIMITS=GPUSLICE_MPS_PRIORITY=server \
--variant servert70;trainer:GPUSLICE_BENCH_LIMITS=GPUSLICE_MPS_PRIORITY=server+GPUSLICE_MPS_LOW_THREADS=70"
OUT=$W timeout 560 bench/gpu/priority_mps_round.sh req2ms > $R/round.txt 2>&1
echo "round: exit $?"
cp $W/req2ms-mps/log.txt $R/log.txt 2>/dev/null
tar czf $R/c1.tgz -C $W . 2>/dev/null
grep -E "steps/s|of alone|paired|exit" $R/round.txt $R/log.txt | tail -n 30
