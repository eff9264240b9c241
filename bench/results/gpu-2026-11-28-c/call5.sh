#!/usr/bin/env bash
# Device call 5 of 2026-11-28-c (one H200): every quota path under 8 GiB with the driver's own
# per-process figure sampled every 40 ms (contexts with their first launch, the program's own
# globals loaded before or after its context, lazy and EAGER), the MPS backstop, and the
# launch/allocation cost A/B.
set -uo pipefail
export PYTHONUNBUFFERED=1
R=$OUT; W=/tmp/c5; mkdir -p $W
OUT=$W/build tests/gpu/run.sh none > $R/build.txt 2>&1 || { echo build failed; tail -30 $R/build.txt; exit 1; }
OUT=$W/paths timeout 300 tests/gpu/driver_paths.sh --cases contexts,growth,globals,globals_eager,globals_first,globals_first_eager,heap,stack,graph,capture,module,printf,load8 --seconds 30 > $R/paths.txt 2>&1
echo "paths: exit $?"
OUT=$W/backstop CUDA_VISIBLE_DEVICES=0 timeout 90 tests/gpu/mps_backstop.sh > $R/backstop.txt 2>&1
echo "backstop: exit $?"
OUT=$W/ab timeout 130 tests/gpu/run.sh launchab > $R/ab.txt 2>&1
echo "launchab: exit $?"
tar czf $R/c5.tgz -C $W --exclude build . 2>/dev/null
tail -n 16 $R/paths.txt; tail -n 6 $R/backstop.txt; grep -E "^##|median|mean|launch|alloc" $R/ab.txt | head -40
