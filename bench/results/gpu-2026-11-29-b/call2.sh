#!/usr/bin/env bash
# Device call 2 of 2026-11-29-b (one H200): every quota path of issue 42 under 8 GiB on this tree
# (tests/gpu/driver_paths.sh, the driver's own per-process figure every 40 ms, the eight-process
# churn), then issue 41's 2 ms requests at 30% under MPS with the defaults against three tuning
# experiments: the higher one's resume grace off (its own GPUSLICE_PRIORITY_GRACE=0ms), and builds
# whose MPS default ramp (PriorityTuning::in_flight_ramp_ns, 30 ms) is 5 ms or 0 (copies of the
# tree with that one constant changed; the trainer preloads them through GPUSLICE_BENCH_LIB).
set -uo pipefail
export PYTHONUNBUFFERED=1
R=$OUT; W=/tmp/c2; mkdir -p "$W"
t0=$SECONDS
prefix=(); [ -d .devdeps ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.devdeps")
OUT=$W/paths timeout 240 tests/gpu/driver_paths.sh --cases contexts,growth,globals,globals_eager,globals_first,globals_first_eager,heap,stack,graph,capture,module,printf,load8 --seconds 30 > "$R/paths.txt" 2>&1
echo "paths: exit $? at $((SECONDS - t0)) s"
tar czf "$R/paths.tgz" -C "$W" paths 2>/dev/null
cmake --build build -j"$(nproc)" --target gpuslice_cli > /dev/null 2>&1
for ramp in 5000000 0; do
  t=/tmp/ramp$ramp; mkdir -p "$t"
  cp -r src cmake CMakeLists.txt tests/mock_driver examples packaging docs LICENSE README.md "$t/" 2>/dev/null
  mkdir -p "$t/tests" && mv "$t/mock_driver" "$t/tests/" 2>/dev/null
  sed -i "s|  if (mps_client::active()) defaults.in_flight_bound_ns = kMpsInFlightBoundNs;|&\n  if (mps_client::active()) defaults.in_flight_ramp_ns = $ramp;|" "$t/src/interposer/priority_sharing.cpp"
  grep -c "in_flight_ramp_ns = $ramp" "$t/src/interposer/priority_sharing.cpp"
  (cd "$t" && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGPUSLICE_BUILD_NODE=OFF -DGPUSLICE_BUILD_TESTS=OFF \
    -DGPUSLICE_BUILD_BENCH=OFF "${prefix[@]}" > build.log 2>&1 &&
    cmake --build build -j"$(nproc)" --target gpuslice_preload >> build.log 2>&1) || { tail -20 "$t/build.log"; }
done
echo "ramp builds at $((SECONDS - t0)) s"
left=$((565 - (SECONDS - t0)))
timeout "$left" python3 bench/gpu/priority_bench.py --lib build/lib/libgpuslice.so --cli build/bin/gpuslice \
  --seconds 15 --alone-seconds 6 --out "$W/req2" --paired --loads 30 --server-batch 4 --server-tokens 256 \
  --only-priorities --mps \
  --variant "grace0;server:GPUSLICE_PRIORITY_GRACE=0ms" \
  --variant "ramp5;server:GPUSLICE_BENCH_LIB=/tmp/ramp5000000/build/lib/libgpuslice.so;trainer:GPUSLICE_BENCH_LIB=/tmp/ramp5000000/build/lib/libgpuslice.so" \
  --variant "ramp0;server:GPUSLICE_BENCH_LIB=/tmp/ramp0/build/lib/libgpuslice.so;trainer:GPUSLICE_BENCH_LIB=/tmp/ramp0/build/lib/libgpuslice.so" \
  > "$R/req2.txt" 2>&1
echo "req2ms mps: exit $? at $((SECONDS - t0)) s"
tar czf "$R/req2.tgz" -C "$W" req2 2>/dev/null
tail -n 18 "$R/paths.txt"; grep -E "paired|alone|idle" "$R/req2.txt" | tail -n 20
