#!/usr/bin/env bash
# The whole test suite as CI runs it (README: `make test`):
#   1. release build of everything, all tests (unit, end-to-end on the simulated driver, node)
#   2. ASan+UBSan build, all tests
#   3. TSan build, the concurrent components (ledger, limiter, profiler, interposer tables)
#   4. libFuzzer (clang) on the parsers, briefly
#   5. clang-format and clang-tidy
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
stage() { printf '\n==== %s\n' "$*"; }

stage "release build"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPUSLICE_BUILD_NODE=ON -DGPUSLICE_BUILD_TESTS=ON \
  -DGPUSLICE_BUILD_BENCH=ON >/dev/null
cmake --build build -j"$jobs"
stage "tests (release)"
ctest --test-dir build --output-on-failure -j"$jobs"

stage "ASan+UBSan build"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DGPUSLICE_SANITIZE=address,undefined -DGPUSLICE_BUILD_NODE=ON \
  -DGPUSLICE_BUILD_TESTS=ON -DGPUSLICE_BUILD_BENCH=OFF >/dev/null
cmake --build build-asan -j"$jobs"
stage "tests (ASan+UBSan)"
GPUSLICE_STRESS_SECONDS=6 ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs"

stage "TSan build (concurrent components)"
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DGPUSLICE_SANITIZE=thread -DGPUSLICE_BUILD_NODE=OFF \
  -DGPUSLICE_BUILD_TESTS=ON -DGPUSLICE_BUILD_BENCH=OFF >/dev/null
tsan_tests=(shm_tests limiter_test profiler_test interposer_test)
cmake --build build-tsan -j"$jobs" --target "${tsan_tests[@]}"
stage "tests (TSan)"
# The multi-process SIGKILL stress test runs here too, shorter (TSan slows every access ~10x).
for t in "${tsan_tests[@]}"; do
  GPUSLICE_STRESS_SECONDS=8 TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 "build-tsan/bin/$t" --gtest_brief=1
done

stage "fuzzing the parsers (libFuzzer)"
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DGPUSLICE_BUILD_FUZZ=ON -DGPUSLICE_BUILD_TESTS=OFF \
  -DGPUSLICE_BUILD_BENCH=OFF -DGPUSLICE_BUILD_NODE=OFF >/dev/null
cmake --build build-fuzz -j"$jobs"
fuzz/run.sh build-fuzz "${GPUSLICE_FUZZ_SECONDS:-15}"

stage "clang-format"
scripts/check-format.sh

stage "clang-tidy (the injected library's sources)"
scripts/tidy.sh build

stage "all stages passed"
