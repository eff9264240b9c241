// Copies are hooked so the profiler can tell their directions apart (cuMemcpyH2D/D2H/D2D, as
// Alnair names them), and so the compute limiter learns when a synchronous copy drained the queue.
// With neither active each hook is a forward.
// A process that borrowed memory (reclaim_engine.h) counts its copies, so that a move of that memory
// to host memory and back holds them like launches.
#include "interposer/hook_prologue.h"
#include "interposer/reclaim/reclaim_engine.h"
#include "interposer/sync_hook.h"

#define GS_COPY_HOOK(sym, params, args)                             \
  GS_EXPORT CUresult sym params {                                   \
    GS_CUDA_HOOK_PROLOGUE(sym);                                     \
    ::gpuslice::interposer::reclaim::SubmissionScope gs_submission; \
    return real args;                                               \
  }

// A synchronous copy: counted like the others, and a host synchronisation for the launch gate.
#define GS_SYNC_COPY_HOOK(sym, params, args)                                  \
  GS_EXPORT CUresult sym params {                                             \
    GS_CUDA_HOOK_PROLOGUE(sym);                                               \
    ::gpuslice::interposer::reclaim::SubmissionScope gs_submission;           \
    const bool gated = ::gpuslice::interposer::launch_gated();                \
    if (gated) ::gpuslice::interposer::note_sync_begin();                     \
    CUresult r = real args;                                                   \
    if (r == CUDA_SUCCESS && gated) ::gpuslice::interposer::note_host_sync(); \
    return r;                                                                 \
  }

GS_COPY_HOOK(cuMemcpyHtoD_v2, (CUdeviceptr dst, const void* src, size_t n), (dst, src, n))
GS_COPY_HOOK(cuMemcpyHtoD_v2_ptds, (CUdeviceptr dst, const void* src, size_t n), (dst, src, n))
GS_SYNC_COPY_HOOK(cuMemcpyDtoH_v2, (void* dst, CUdeviceptr src, size_t n), (dst, src, n))
GS_SYNC_COPY_HOOK(cuMemcpyDtoH_v2_ptds, (void* dst, CUdeviceptr src, size_t n), (dst, src, n))
GS_COPY_HOOK(cuMemcpyDtoD_v2, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n))
GS_COPY_HOOK(cuMemcpyDtoD_v2_ptds, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n))
GS_COPY_HOOK(cuMemcpyHtoDAsync_v2, (CUdeviceptr dst, const void* src, size_t n, CUstream s), (dst, src, n, s))
GS_COPY_HOOK(cuMemcpyHtoDAsync_v2_ptsz, (CUdeviceptr dst, const void* src, size_t n, CUstream s),
             (dst, src, n, s))
GS_COPY_HOOK(cuMemcpyDtoHAsync_v2, (void* dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s))
GS_COPY_HOOK(cuMemcpyDtoHAsync_v2_ptsz, (void* dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s))
GS_SYNC_COPY_HOOK(cuMemcpy, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n))
GS_SYNC_COPY_HOOK(cuMemcpy_ptds, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n))
GS_COPY_HOOK(cuMemcpyAsync, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s))
GS_COPY_HOOK(cuMemcpyAsync_ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s))
