#!/usr/bin/env bash
# aarch64 stage of `make test`: cross-builds the injected libraries, the CLI, the simulated driver
# and the e2e probes with Debian's aarch64 toolchain, checks the libraries' portability, and runs
# the end-to-end scenarios under qemu-user with the cross sysroot as the target's root.
# Usage: scripts/test-aarch64.sh [BUILD_DIR]   (default build-aarch64)
# GPUSLICE_CMAKE_INIT=FILE: an initial cache for the build (scripts/test.sh: cmake/ci-build.cmake);
# GPUSLICE_BUILD_ONLY=1: build, run nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-aarch64}
sysroot=/usr/aarch64-linux-gnu
launcher_flags=()
command -v ccache >/dev/null && launcher_flags=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
# nlohmann-json (the CLI's status JSON) is header-only: the host's package serves the cross build.
cmake --no-warn-unused-cli -S . -B "$build" -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake ${GPUSLICE_CMAKE_INIT:+-C "$GPUSLICE_CMAKE_INIT"} -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DGPUSLICE_BUILD_NODE=OFF -DGPUSLICE_BUILD_TESTS=ON -DGPUSLICE_BUILD_BENCH=OFF \
  -Dnlohmann_json_DIR=/usr/share/cmake/nlohmann_json "${launcher_flags[@]}" >/dev/null
cmake --build "$build" -j"$(nproc)" --target gpuslice_preload gpuslice_addpath gpuslice_cli gpuslice_mock_cuda \
  gpuslice_mock_nvml probe_app rtld_next_probe
[ -z "${GPUSLICE_BUILD_ONLY:-}" ] || exit 0  # scripts/test.sh builds ahead, runs later
scripts/check-portable.sh "$build/lib/libgpuslice.so" "$build/lib/libgpuslice-addpath.so"
qemu=(qemu-aarch64-static -L "$sysroot")
echo "gpuslice (aarch64): $("${qemu[@]}" "$build/bin/gpuslice" version 2>&1 | head -n1)"
scripts/e2e-scenarios.sh "$build" "${qemu[@]}"
