#!/usr/bin/env bash
# clang-tidy over every C++ source: the injected library (the code that runs inside other
# processes), the node daemon, its kubelet plugins and the CLI. src/node and src/cli carry their own
# .clang-tidy that allows string concatenation on their cold paths.
# The clang static analyzer (clang-tidy's default clang-analyzer-* checks, three quarters of the
# per-file time) runs where a path-sensitive bug costs most and tests reach least: the lock-free
# code on the injected library's hot paths (hooks, books, limiter, shared ledger, profiler,
# logging). Every other file gets the same bugprone, performance and misc checks (.clang-tidy)
# without the analyzer.
# Usage: scripts/tidy.sh [build-dir]   (the build dir needs compile_commands.json)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
hot=$(find src/interposer src/limiter src/shared_state src/profiler src/common -name '*.cpp' | sort)
cold=$(find src/config src/portable src/status src/addpath src/node src/cli -name '*.cpp' | sort)
# The build may carry GCC-only warning flags (cmake/warnings.cmake) that clang does not know.
# One clang-tidy per core, a few files each: the stage is CPU-bound and files are independent.
# A unity build (GPUSLICE_UNITY_BUILD) lists its batches, not its sources, in
# compile_commands.json: each batch's command is given to every source it includes.
db="$build/tidy"
mkdir -p "$db"
python3 - "$build/compile_commands.json" "$db/compile_commands.json" <<'PY'
import json, re, sys
entries = []
for e in json.load(open(sys.argv[1])):
    if "/Unity/unity_" not in e["file"]:
        entries.append(e)
        continue
    for source in re.findall(r'^#include "([^"]+)"', open(e["file"]).read(), re.M):
        entries.append(dict(e, file=source, command=e["command"].replace(e["file"], source)))
json.dump(entries, open(sys.argv[2], "w"))
PY
tidy=(clang-tidy -p "$db" --quiet --extra-arg=-Wno-unknown-warning-option)
printf '%s\n' $hot | xargs -P"$(nproc)" -n4 "${tidy[@]}"
printf '%s\n' $cold | xargs -P"$(nproc)" -n4 "${tidy[@]}" --checks=-clang-analyzer-*
echo "clang-tidy: $(echo "$hot" | wc -w) files with the analyzer, $(echo "$cold" | wc -w) without; all clean"
