#!/usr/bin/env bash
# Older-glibc stage of `make test`: the end-to-end scenarios with libgpuslice.so and the simulated
# driver running under Debian 11's glibc 2.31 (older than this Debian 12 host's 2.36), loaded from
# a directory by bullseye's own dynamic loader. The probe and the simulated driver are built to
# run there too (GPUSLICE_PORTABLE_FIXTURES). The library under test is the release build's own
# (RELEASE_BUILD/lib/libgpuslice.so, the one that ships), not a rebuild of it.
# Usage: scripts/test-old-glibc.sh [BUILD_DIR] [RELEASE_BUILD]   (default build-oldglibc build)
# GPUSLICE_CMAKE_INIT=FILE: an initial cache for the build (scripts/test.sh: cmake/ci-build.cmake);
# GPUSLICE_BUILD_ONLY=1: build, run nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-oldglibc}
release=${2:-build}
[ -f "$release/lib/libgpuslice.so" ] || { echo "older-glibc stage: no $release/lib/libgpuslice.so (build it first)" >&2; exit 1; }
[ "$(uname -m)" = x86_64 ] || { echo "older-glibc stage: x86_64 hosts only; skipped"; exit 0; }
root=$(scripts/fetch-bullseye-glibc.sh)
loader="$root/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
launcher_flags=()
command -v ccache >/dev/null && launcher_flags=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$build" ${GPUSLICE_CMAKE_INIT:+-C "$GPUSLICE_CMAKE_INIT"} -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPUSLICE_BUILD_NODE=OFF -DGPUSLICE_BUILD_TESTS=ON \
  -DGPUSLICE_BUILD_BENCH=OFF -DGPUSLICE_PORTABLE_FIXTURES=ON "${launcher_flags[@]}" >/dev/null
cmake --build "$build" -j"$(nproc)" --target probe_app rtld_next_probe gpuslice_mock_cuda gpuslice_mock_nvml
[ -z "${GPUSLICE_BUILD_ONLY:-}" ] || exit 0  # scripts/test.sh builds ahead, runs later
mkdir -p "$build/lib"
cp "$release/lib/libgpuslice.so" "$build/lib/libgpuslice.so"
echo "glibc under test: $("$loader" --library-path "$root/lib/x86_64-linux-gnu" "$root/lib/x86_64-linux-gnu/libc.so.6" | head -n1)"
scripts/check-portable.sh "$build/lib/libgpuslice.so"
scripts/e2e-scenarios.sh "$build" "$loader" --library-path \
  "$PWD/$build/mock:$root/lib/x86_64-linux-gnu:$root/usr/lib/x86_64-linux-gnu"
