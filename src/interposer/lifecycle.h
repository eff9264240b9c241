// Bringing gpuslice up inside a process: on the first hooked call (never from a constructor), in
// a forked child on its first hooked call, and the watcher thread that drives each feature's
// periodic work (limits file, memory books, compute gate) off the application's threads.
#pragma once

#include "abi/cuda_abi.h"

namespace gpuslice::interposer {

// CUDA_SUCCESS once initialised; CUDA_ERROR_NOT_INITIALIZED when the configuration or the shared
// state is unusable (fail closed: the message was logged once, naming the variable or file).
CUresult ensure_initialized();

// From now on every hooked call fails as ensure_initialized() does for a bad configuration (the
// caller has logged why).
void fail_closed();

}  // namespace gpuslice::interposer
