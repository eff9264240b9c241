#!/usr/bin/env bash
# The whole test suite as CI runs it (README: `make test`):
#   1. release build of everything, all tests (unit, end-to-end on the simulated driver, node)
#   2. ASan+UBSan build, all tests
#   3. TSan build, the concurrent components (ledger, limiter, profiler, interposer tables)
#   4. libFuzzer (clang) on the parsers, briefly
#   5. clang-format and clang-tidy
#   6. the Helm chart, plain manifests, Grafana dashboard and alert rules (scripts/check-chart.sh)
#   7. portability: the injected libraries' glibc floor, the e2e scenarios under glibc 2.31 and on
#      aarch64 (qemu-user), install layout and Debian packages (lintian)
#   8. a real kubelet and API server with the chart (scripts/k8s-real.sh), when their binaries are cached
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
# Each stage header shows the minutes spent so far, so CI logs tell which stage costs what.
started=$SECONDS
stage() { printf '\n==== [%d:%02d] %s\n' $(((SECONDS - started) / 60)) $(((SECONDS - started) % 60)) "$*"; }

# ccache (installed by make deps-test) serves what an earlier run on this machine compiled already,
# from any clone (paths hashed relative to the checkout); a clean clone on a new machine compiles
# everything once, as without it.
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
fi

stage "release build"
cmake -S . -B build "${launcher[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPUSLICE_BUILD_NODE=ON -DGPUSLICE_BUILD_TESTS=ON \
  -DGPUSLICE_BUILD_BENCH=ON >/dev/null
cmake --build build -j"$jobs"
stage "tests (release)"
ctest --test-dir build --output-on-failure -j"$jobs"

stage "ASan+UBSan build"
cmake -S . -B build-asan "${launcher[@]}" -DCMAKE_BUILD_TYPE=Debug -DGPUSLICE_SANITIZE=address,undefined -DGPUSLICE_BUILD_NODE=ON \
  -DGPUSLICE_BUILD_TESTS=ON -DGPUSLICE_BUILD_BENCH=OFF >/dev/null
cmake --build build-asan -j"$jobs"
stage "tests (ASan+UBSan)"
# Programs under test preload our libraries ahead of the ASan runtime (verify_asan_link_order=0).
GPUSLICE_STRESS_SECONDS=6 ASAN_OPTIONS=detect_leaks=1:verify_asan_link_order=0 \
  LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs"

stage "TSan build (concurrent components)"
cmake -S . -B build-tsan "${launcher[@]}" -DCMAKE_BUILD_TYPE=Debug -DGPUSLICE_SANITIZE=thread -DGPUSLICE_BUILD_NODE=OFF \
  -DGPUSLICE_BUILD_TESTS=ON -DGPUSLICE_BUILD_BENCH=OFF >/dev/null
# priority_test: the priority gate is entered by every launching thread (windows, costs, holds).
tsan_tests=(shm_tests limiter_test priority_test profiler_test interposer_test)
cmake --build build-tsan -j"$jobs" --target "${tsan_tests[@]}"
stage "tests (TSan)"
# The multi-process SIGKILL stress test runs here too, shorter (TSan slows every access ~10x).
for t in "${tsan_tests[@]}"; do
  GPUSLICE_STRESS_SECONDS=8 TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 "build-tsan/bin/$t" --gtest_brief=1
done

stage "fuzzing the parsers (libFuzzer)"
CC=clang CXX=clang++ cmake -S . -B build-fuzz "${launcher[@]}" -DGPUSLICE_BUILD_FUZZ=ON -DGPUSLICE_BUILD_TESTS=OFF \
  -DGPUSLICE_BUILD_BENCH=OFF -DGPUSLICE_BUILD_NODE=OFF >/dev/null
cmake --build build-fuzz -j"$jobs" --target gpuslice_fuzzers
fuzz/run.sh build-fuzz "${GPUSLICE_FUZZ_SECONDS:-15}"

stage "clang-format"
scripts/check-format.sh

stage "clang-tidy (the library, the node daemon and the CLI)"
scripts/tidy.sh build

stage "Helm chart, manifests, dashboard and alerts (helm, Kubernetes schemas, promtool, a test run of the daemon)"
scripts/check-chart.sh build

# --- portability (scripts/check-portable.sh, test-old-glibc.sh, test-aarch64.sh, test-install.sh)
stage "portable injected libraries (glibc floor, no C++ runtime)"
scripts/check-portable.sh build/lib/libgpuslice.so build/lib/libgpuslice-addpath.so

stage "older glibc: e2e scenarios under Debian 11's glibc 2.31"
scripts/test-old-glibc.sh build-oldglibc build

stage "aarch64: cross build, e2e scenarios under qemu-user"
scripts/test-aarch64.sh build-aarch64

stage "install layout and Debian packages (gpuslice run from a scratch root)"
scripts/test-install.sh build
# --- end portability

# A real control plane and kubelet: only where the binaries were built and cached before (make
# k8s-real builds them once, about 30 minutes); otherwise it says it was skipped.
stage "real Kubernetes (kube-apiserver, scheduler, kubelet from Debian's source package; cached)"
scripts/k8s-real.sh check build

stage "all stages passed"
