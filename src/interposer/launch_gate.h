// Entry from the launch hooks into the compute limiter. Called only while some device has a
// compute limit (g_compute_active), so an unlimited process pays one predictable branch per launch.
#pragma once

#include "abi/cuda_abi.h"
#include "interposer/hooks.h"
#include "interposer/runtime.h"

namespace gpuslice::interposer {

void gate_launch(CUstream stream);
// After the application's own synchronisation returned: the device finished what was launched.
void note_host_sync();

// Pushes the busy time the limiters measured into the ledger (for status and metrics).
void publish_compute_usage();
// At exit: charge outstanding work of every limiter.
void settle_limiters();

}  // namespace gpuslice::interposer

// A hook whose successful return means the device finished the work queued before it (a host
// synchronisation, a synchronous copy): the compute limiter uses that to see CPU pauses.
#define GS_HOOK_NOTIFYING_SYNC(sym, params, args)                                                      \
  GS_EXPORT CUresult sym params {                                                                      \
    ::gpuslice::interposer::ProfileScope scope(::gpuslice::interposer::HookId::sym);                   \
    auto real = REAL(sym);                                                                             \
    if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;                                            \
    CUresult r = real args;                                                                            \
    if (r == CUDA_SUCCESS && ::gpuslice::interposer::g_compute_active.load(std::memory_order_relaxed)) \
      ::gpuslice::interposer::note_host_sync();                                                        \
    return r;                                                                                          \
  }
