#!/usr/bin/env bash
# clang-tidy over every C++ source: the injected library (the code that runs inside other
# processes), the node daemon, its kubelet plugins and the CLI. src/node and src/cli carry their own
# .clang-tidy that allows string concatenation on their cold paths.
# Usage: scripts/tidy.sh [build-dir]   (the build dir needs compile_commands.json)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
files=$(ls src/interposer/*.cpp src/common/*.cpp src/config/*.cpp src/shared_state/*.cpp src/limiter/*.cpp \
  src/profiler/*.cpp src/portable/*.cpp src/status/*.cpp src/addpath/*.cpp src/node/*.cpp src/node/dra/*.cpp src/node/mps/*.cpp \
  src/cli/*.cpp)
# The build may carry GCC-only warning flags (cmake/warnings.cmake) that clang does not know.
# One clang-tidy per core, a few files each: the stage is CPU-bound and files are independent.
printf '%s\n' $files | xargs -P"$(nproc)" -n4 clang-tidy -p "$build" --quiet --extra-arg=-Wno-unknown-warning-option
echo "clang-tidy: $(echo "$files" | wc -w) files clean"
