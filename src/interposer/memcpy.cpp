// Copies are hooked so the profiler can tell their directions apart (cuMemcpyH2D/D2H/D2D, as
// Alnair names them), and so the compute limiter learns when a synchronous copy drained the queue.
// With neither active each hook is a forward.
#include "interposer/hooks.h"
#include "interposer/launch_gate.h"

using gpuslice::interposer::HookId;
using gpuslice::interposer::ProfileScope;

#define GS_COPY_HOOK(sym, params, args)                     \
  GS_EXPORT CUresult sym params {                           \
    ProfileScope scope(HookId::sym);                        \
    auto real = REAL(sym);                                  \
    if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED; \
    return real args;                                       \
  }

GS_COPY_HOOK(cuMemcpyHtoD_v2, (CUdeviceptr dst, const void* src, size_t n), (dst, src, n))
GS_COPY_HOOK(cuMemcpyHtoD_v2_ptds, (CUdeviceptr dst, const void* src, size_t n), (dst, src, n))
GS_HOOK_NOTIFYING_SYNC(cuMemcpyDtoH_v2, (void* dst, CUdeviceptr src, size_t n), (dst, src, n))
GS_HOOK_NOTIFYING_SYNC(cuMemcpyDtoH_v2_ptds, (void* dst, CUdeviceptr src, size_t n), (dst, src, n))
GS_COPY_HOOK(cuMemcpyDtoD_v2, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n))
GS_COPY_HOOK(cuMemcpyDtoD_v2_ptds, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n))
GS_COPY_HOOK(cuMemcpyHtoDAsync_v2, (CUdeviceptr dst, const void* src, size_t n, CUstream s), (dst, src, n, s))
GS_COPY_HOOK(cuMemcpyHtoDAsync_v2_ptsz, (CUdeviceptr dst, const void* src, size_t n, CUstream s),
             (dst, src, n, s))
GS_COPY_HOOK(cuMemcpyDtoHAsync_v2, (void* dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s))
GS_COPY_HOOK(cuMemcpyDtoHAsync_v2_ptsz, (void* dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s))
GS_HOOK_NOTIFYING_SYNC(cuMemcpy, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n))
GS_HOOK_NOTIFYING_SYNC(cuMemcpy_ptds, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n))
GS_COPY_HOOK(cuMemcpyAsync, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s))
GS_COPY_HOOK(cuMemcpyAsync_ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s))
