#!/bin/sh
# Load benchmark of gpuslice-node: 1,000 requests/s for 30 s against /metrics and /api/v1/status on
# loopback, reporting errors and latency percentiles. Exit status 0 means no error.
#   bench/node/load.sh [build dir] [extra node_load_bench flags]
set -eu
build=${1:-build}
[ $# -gt 0 ] && shift
cmake --build "$build" --target gpuslice-node node_load_bench >/dev/null
exec "$build/bin/node_load_bench" --rate 1000 --duration 30 --connections 8 --containers 20 "$@"
