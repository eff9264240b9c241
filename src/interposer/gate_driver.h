// What the launch gates (the compute limiter, the priority gate) take from the process and the real
// driver besides their driver ops (core_driver().gates): one clock (a test may simulate it), and the
// stream-capture query that keeps them from draining a stream being captured into a graph.
#pragma once

#include "abi/cuda_abi.h"
#include "common/clock.h"

namespace gpuslice::interposer {

Clock& gate_clock();  // never destroyed: launches may run during exit
// Tests: the clock of the gates created from now on; null gives back the system's monotonic clock.
void set_gate_clock(Clock* clock);
// cuStreamIsCapturing of the real driver; CUDA_ERROR_NOT_SUPPORTED where it has none.
CUresult stream_capture_status(CUstream stream, int* status);

}  // namespace gpuslice::interposer
