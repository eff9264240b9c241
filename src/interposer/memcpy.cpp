// Copies are hooked so the profiler can tell their directions apart (cuMemcpyH2D/D2H/D2D, as
// Alnair names them), and so the compute limiter learns when a synchronous copy drained the queue.
// With neither active each hook is a forward.
#include "interposer/hook_prologue.h"
#include "interposer/sync_hook.h"

#define GS_COPY_HOOK(sym, params, args) \
  GS_EXPORT CUresult sym params {       \
    GS_CUDA_HOOK_PROLOGUE(sym);         \
    return real args;                   \
  }

GS_COPY_HOOK(cuMemcpyHtoD_v2, (CUdeviceptr dst, const void* src, size_t n), (dst, src, n))
GS_COPY_HOOK(cuMemcpyHtoD_v2_ptds, (CUdeviceptr dst, const void* src, size_t n), (dst, src, n))
GS_SYNC_HOOK(cuMemcpyDtoH_v2, (void* dst, CUdeviceptr src, size_t n), (dst, src, n))
GS_SYNC_HOOK(cuMemcpyDtoH_v2_ptds, (void* dst, CUdeviceptr src, size_t n), (dst, src, n))
GS_COPY_HOOK(cuMemcpyDtoD_v2, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n))
GS_COPY_HOOK(cuMemcpyDtoD_v2_ptds, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n))
GS_COPY_HOOK(cuMemcpyHtoDAsync_v2, (CUdeviceptr dst, const void* src, size_t n, CUstream s), (dst, src, n, s))
GS_COPY_HOOK(cuMemcpyHtoDAsync_v2_ptsz, (CUdeviceptr dst, const void* src, size_t n, CUstream s),
             (dst, src, n, s))
GS_COPY_HOOK(cuMemcpyDtoHAsync_v2, (void* dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s))
GS_COPY_HOOK(cuMemcpyDtoHAsync_v2_ptsz, (void* dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s))
GS_SYNC_HOOK(cuMemcpy, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n))
GS_SYNC_HOOK(cuMemcpy_ptds, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n))
GS_COPY_HOOK(cuMemcpyAsync, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s))
GS_COPY_HOOK(cuMemcpyAsync_ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s))
