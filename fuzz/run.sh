#!/usr/bin/env bash
# Runs every libFuzzer target already built in a build directory, each for N seconds (one per core
# at a time), starting from its seed corpus in fuzz/corpus/<target>/. Builds nothing. Exits
# non-zero if any target crashes, leaks, times out or breaks an invariant; crashing inputs are kept
# in <build-dir>/fuzz-artifacts/.
#
#   fuzz/run.sh <build-dir> [seconds-per-target=60]
set -euo pipefail

build_dir=${1:?usage: fuzz/run.sh <build-dir> [seconds-per-target]}
seconds=${2:-60}
fuzz_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin_dir=$build_dir/bin

mapfile -t targets < <(find "$bin_dir" -maxdepth 1 -type f -name 'fuzz_*' -perm -u+x 2>/dev/null | sort)
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz/run.sh: no fuzz targets in $bin_dir (configure with CC=clang CXX=clang++ -DGPUSLICE_BUILD_FUZZ=ON)" >&2
  exit 1
fi

# New inputs go to a scratch corpus so the checked-in seeds stay small and reviewed.
work_dir=$(mktemp -d "${TMPDIR:-/tmp}/gpuslice-fuzz-XXXXXX")
trap 'rm -rf "$work_dir"' EXIT
artifacts=$build_dir/fuzz-artifacts
mkdir -p "$artifacts"

# One target per core at a time (FUZZ_JOBS overrides): libFuzzer runs one process per target.
jobs=${FUZZ_JOBS:-$(nproc)}
run_target() {  # run_target PATH: its log and verdict land in $work_dir/<name>.{log,ok}
  local target=$1 name
  name=$(basename "$target")
  local corpora=("$work_dir/$name")
  mkdir -p "$work_dir/$name"
  if [ -d "$fuzz_dir/corpus/$name" ]; then corpora+=("$fuzz_dir/corpus/$name"); fi
  local options=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
                 -artifact_prefix="$artifacts/$name-")
  if [ -f "$fuzz_dir/gpuslice.dict" ]; then options+=(-dict="$fuzz_dir/gpuslice.dict"); fi
  if "$target" "${options[@]}" "${corpora[@]}" >"$work_dir/$name.log" 2>&1; then touch "$work_dir/$name.ok"; fi
}

running=0
for target in "${targets[@]}"; do
  if [ "$running" -ge "$jobs" ]; then wait -n || true; running=$((running - 1)); fi
  run_target "$target" &
  running=$((running + 1))
done
wait

failed=()
for target in "${targets[@]}"; do
  name=$(basename "$target")
  echo "== $name: ${seconds}s"
  if [ -f "$work_dir/$name.ok" ]; then
    grep -E '^stat::(number_of_executed_units|new_units_added):' "$work_dir/$name.log" | sed 's/^/   /' || true
  else
    echo "!! $name failed; last lines of its log:"
    tail -n 40 "$work_dir/$name.log"
    failed+=("$name")
  fi
done

if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz/run.sh: failed: ${failed[*]} (inputs in $artifacts)" >&2
  exit 1
fi
echo "fuzz/run.sh: all ${#targets[@]} targets ran ${seconds}s without a failure"
