// Entry from the launch hooks into the compute limiter. Called only while some device has a
// compute limit (g_compute_active), so an unlimited process pays one predictable branch per launch.
#pragma once

#include "abi/cuda_abi.h"

namespace gpuslice::interposer {

void gate_launch(CUstream stream);
// After the application's own synchronisation returned: the device finished what was launched.
void note_host_sync();

}  // namespace gpuslice::interposer
