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
# The cold sources of a unity build's batches are checked a batch at a time (scripts/tidy_db.py):
# the gRPC, protobuf and JSON headers of the daemon and the CLI are parsed once per batch, not once
# per source, with the same checks and the diagnostics still naming each source.
# The build may carry GCC-only warning flags (cmake/warnings.cmake) that clang does not know.
# One clang-tidy per core, a few files each: the stage is CPU-bound and files are independent.
db="$build/tidy"
rm -rf "$db"
mkdir -p "$db"
# The compilation database clang-tidy reads ($db/compile_commands.json), and the cold sources
# checked one by one ($db/cold_files) or in batches ($db/batches/*/batch.cpp), by tidy_db.py.
{ printf 'hot %s\n' $hot; printf 'cold %s\n' $cold; } | python3 scripts/tidy_db.py "$build/compile_commands.json" "$db"
tidy=(clang-tidy -p "$db" --quiet --extra-arg=-Wno-unknown-warning-option)
printf '%s\n' $hot | xargs -P"$(nproc)" -n4 "${tidy[@]}"
batches=$(find "$db/batches" -name batch.cpp | sort)
printf '%s\n' $(cat "$db/cold_files") $batches | xargs -P"$(nproc)" -n4 "${tidy[@]}" --checks=-clang-analyzer-*
echo "clang-tidy: $(echo "$hot" | wc -w) files with the analyzer, $(echo "$cold" | wc -w) without" \
  "($(echo "$batches" | wc -w) batches of $(cat "$db/batched_count") and $(wc -w <"$db/cold_files") alone); all clean"
