#!/usr/bin/env bash
# The main job: a CUDA program under `gpuslice run --memory 1Gi`, on the real GPU when one is
# present, otherwise on the simulated driver. It prints what the program saw: the quota as its
# total memory, the allocations that fit, the refused one, and a retry after a free.
set -euo pipefail
build=${1:-build}
bin="$build/bin"
state=$(mktemp -d /tmp/gpuslice-demo-XXXXXX)
trap 'rm -rf "$state"' EXIT
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "== real GPU: $(nvidia-smi -L | head -n1)"
else
  echo "== no GPU found: using gpuslice's simulated driver ($build/mock)"
  export LD_LIBRARY_PATH="$PWD/$build/mock${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export GPUSLICE_MOCK_STATE_DIR="$state/mock"
fi
echo "== gpuslice run --memory 1Gi -- gpuslice-demo"
"$bin/gpuslice" run --memory 1Gi --shared-dir "$state/shared" -- "$bin/gpuslice-demo"
