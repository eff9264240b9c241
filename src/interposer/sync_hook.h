// A hook whose successful return means the device finished the work queued before it (a host
// synchronisation, a synchronous copy): the launch gate uses that to see CPU pauses.
#pragma once

#include "interposer/hook_prologue.h"
#include "interposer/launch_gate.h"

#define GS_SYNC_HOOK(sym, params, args)                                       \
  GS_EXPORT CUresult sym params {                                             \
    GS_CUDA_HOOK_PROLOGUE(sym);                                               \
    const bool gated = ::gpuslice::interposer::launch_gated();                \
    if (gated) ::gpuslice::interposer::note_sync_begin();                     \
    CUresult r = real args;                                                   \
    if (r == CUDA_SUCCESS && gated) ::gpuslice::interposer::note_host_sync(); \
    return r;                                                                 \
  }
