#!/usr/bin/env bash
# The whole test suite as CI runs it (README: `make test`):
#   1. release build of everything, all tests (unit, end-to-end on the simulated driver, node)
#   2. ASan+UBSan build, all tests
#   (from here on, each build runs in the background, at the lowest CPU priority, beside the tests
#   of the stage before it: on two cores the tests leave about half the CPU idle; stages 5-7's
#   checks run the same way beside the TSan tests and the fuzzers)
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
# Each stage header shows the minutes spent so far and the CPU time the stages used (children's
# user+system seconds, background builds counted once they are waited for), so CI logs tell which
# stage costs what.
started=$SECONDS
tick=$(getconf CLK_TCK)
cpu_seconds() { awk -v tick="$tick" '{ sub(/.*\) /, ""); printf "%d", ($14 + $15) / tick }' "/proc/$$/stat"; }
stage() {
  printf '\n==== [%d:%02d, cpu %ss] %s\n' $(((SECONDS - started) / 60)) $(((SECONDS - started) % 60)) "$(cpu_seconds)" "$*"
}

# ccache (installed by make deps-test) serves what an earlier run on this machine compiled already,
# from any clone (paths hashed relative to the checkout); a clean clone on a new machine compiles
# everything once, as without it.
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
fi
# Line tables instead of full debug information in every test build (cmake/ci-build.cmake); the
# older-glibc and aarch64 scripts read the same file through GPUSLICE_CMAKE_INIT.
export GPUSLICE_CMAKE_INIT=$PWD/cmake/ci-build.cmake
init=(-C "$GPUSLICE_CMAKE_INIT")
# The test builds' programs (tests, CLI, daemon, fuzzers) are linked by lld (make deps-test installs
# it): about a third of GNU ld's CPU time for each of the hundred-odd executables the stages link.
# Shared libraries, the injected ones among them, keep the default linker, as they ship; so do the
# older-glibc and aarch64 builds.
if command -v ld.lld >/dev/null; then init+=(-DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld); fi

# A build that overlaps a test stage runs in the background at the lowest CPU priority (nice 19):
# the tests, much of their time waiting on sleeps and child processes, get the CPU whenever they
# want it, and the build takes what they leave. Its output goes to a log, shown if it fails.
logs=$(mktemp -d /tmp/gpuslice-ci-XXXXXX)
background_pid=""
in_background() {  # in_background NAME COMMAND-OR-FUNCTION...
  background_name=$1
  shift
  set -m # its own process group, so that `paused` can stop all of it
  (
    renice -n 19 -p "$BASHPID" >/dev/null
    "$@"
  ) >"$logs/$background_name.log" 2>&1 &
  background_pid=$!
  set +m
}
wait_background() {
  if ! wait "$background_pid"; then
    tail -n 100 "$logs/$background_name.log"
    echo "background stage '$background_name' failed (whole log: $logs/$background_name.log)" >&2
    exit 1
  fi
  echo "background stage '$background_name' done"
}
# The tests that compare throughputs and latencies (ctest label "timing") run with the background
# build stopped: two vCPUs are often the two hyperthreads of one core, where even a nice-19
# compiler takes a third of the other thread's speed.
paused() {
  kill -STOP -- "-$background_pid" 2>/dev/null || true
  local status=0
  "$@" || status=$?
  kill -CONT -- "-$background_pid" 2>/dev/null || true
  return "$status"
}
# A failing stage ends the run: the background build with it.
trap '[ -z "$background_pid" ] || kill -- "-$background_pid" 2>/dev/null || true' EXIT

stage "release build"
cmake -S . -B build "${init[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPUSLICE_BUILD_NODE=ON \
  -DGPUSLICE_BUILD_TESTS=ON -DGPUSLICE_BUILD_BENCH=ON >/dev/null
cmake --build build -j"$jobs"

stage "tests (release); the ASan+UBSan build beside them in the background"
cmake -S . -B build-asan "${init[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Debug -DGPUSLICE_SANITIZE=address,undefined \
  -DGPUSLICE_BUILD_NODE=ON -DGPUSLICE_BUILD_TESTS=ON -DGPUSLICE_BUILD_BENCH=OFF >/dev/null
in_background asan-build cmake --build build-asan -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs" -LE timing
paused ctest --test-dir build --output-on-failure -L timing

stage "ASan+UBSan build (what the background did not finish)"
wait_background

# Everything the later stages build, in one background job beside the sanitizer tests: the TSan
# test binaries, the fuzzers (clang), clang-tidy (compiles every source again), the older-glibc
# fixtures and the aarch64 cross build.
tsan_tests=(shm_tests limiter_test priority_test profiler_test interposer_test)
later_builds() {
  set -e
  cmake -S . -B build-tsan "${init[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Debug -DGPUSLICE_SANITIZE=thread \
    -DGPUSLICE_BUILD_NODE=OFF -DGPUSLICE_BUILD_TESTS=ON -DGPUSLICE_BUILD_BENCH=OFF >/dev/null
  cmake --build build-tsan -j"$jobs" --target "${tsan_tests[@]}"
  CC=clang CXX=clang++ cmake -S . -B build-fuzz "${init[@]}" "${launcher[@]}" -DGPUSLICE_BUILD_FUZZ=ON \
    -DGPUSLICE_BUILD_TESTS=OFF -DGPUSLICE_BUILD_BENCH=OFF -DGPUSLICE_BUILD_NODE=OFF >/dev/null
  cmake --build build-fuzz -j"$jobs" --target gpuslice_fuzzers
  scripts/tidy.sh build >"$logs/tidy.out" 2>&1 || { echo "clang-tidy failed" >"$logs/tidy.failed"; }
  GPUSLICE_BUILD_ONLY=1 scripts/test-old-glibc.sh build-oldglibc build
  GPUSLICE_BUILD_ONLY=1 scripts/test-aarch64.sh build-aarch64
}

stage "tests (ASan+UBSan); the later stages' builds and clang-tidy beside them in the background"
in_background later-builds later_builds
# Programs under test preload our libraries ahead of the ASan runtime (verify_asan_link_order=0).
export GPUSLICE_STRESS_SECONDS=6 ASAN_OPTIONS=detect_leaks=1:verify_asan_link_order=0 \
  LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir build-asan --output-on-failure -j"$jobs" -LE timing
paused ctest --test-dir build-asan --output-on-failure -L timing
unset GPUSLICE_STRESS_SECONDS ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS

stage "TSan, fuzzer, older-glibc and aarch64 builds, clang-tidy (what the background did not finish)"
wait_background

# The checks that follow the builds run in the background (nice 19) beside the TSan tests and the
# fuzzers, which leave part of the CPU idle; their output is printed once they are done, in order.
tail_checks() {
  set -e
  stage "clang-format"
  scripts/check-format.sh
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
}

stage "tests (TSan); format, chart, portability and install checks beside them in the background"
in_background tail-checks tail_checks
# The multi-process SIGKILL stress test runs here too, shorter (TSan slows every access ~10x).
for t in "${tsan_tests[@]}"; do
  GPUSLICE_STRESS_SECONDS=8 TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 "build-tsan/bin/$t" --gtest_brief=1
done

stage "fuzzing the parsers (libFuzzer)"
fuzz/run.sh build-fuzz "${GPUSLICE_FUZZ_SECONDS:-15}"

stage "clang-tidy (the library, the node daemon and the CLI; ran in the background above)"
cat "$logs/tidy.out"
[ ! -e "$logs/tidy.failed" ] || exit 1

stage "format, chart, portability and install checks (ran in the background above)"
wait_background
cat "$logs/tail-checks.log"

# A real control plane and kubelet: only where the binaries were built and cached before (make
# k8s-real builds them once, about 30 minutes); otherwise it says it was skipped.
stage "real Kubernetes (kube-apiserver, scheduler, kubelet from Debian's source package; cached)"
scripts/k8s-real.sh check build

rm -rf "$logs"
stage "all stages passed"
