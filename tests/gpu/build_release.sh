#!/usr/bin/env bash
# The release build of the library that the GPU scripts run against, in one place: configure (no
# node, tests or benchmarks; header-only dependencies carried in .devdeps/, a CMake prefix, see
# tests/gpu/run.sh) and build the named targets, all output appended to LOG; on failure its last
# lines are printed and the exit status is 1.
#   tests/gpu/build_release.sh [-S SOURCE_DIR] [-B BUILD_DIR] LOG TARGET...   (default . and build)
set -uo pipefail
src=. dir=build
while [ $# -gt 0 ]; do
  case "$1" in
    -S) src=$2; shift 2 ;;
    -B) dir=$2; shift 2 ;;
    *) break ;;
  esac
done
if [ $# -lt 2 ]; then
  echo "usage: $0 [-S SOURCE_DIR] [-B BUILD_DIR] LOG TARGET..." >&2
  exit 2
fi
log=$1
shift
prefix=()
[ -d .devdeps ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.devdeps")
{
  cmake -S "$src" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DGPUSLICE_BUILD_NODE=OFF -DGPUSLICE_BUILD_TESTS=OFF \
    -DGPUSLICE_BUILD_BENCH=OFF "${prefix[@]}" &&
    cmake --build "$dir" -j"$(nproc)" --target "$@"
} >> "$log" 2>&1 || { tail -40 "$log"; exit 1; }
