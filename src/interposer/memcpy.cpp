// Copies are hooked so the profiler can tell their directions apart (cuMemcpyH2D/D2H/D2D, as
// Alnair names them), so the compute limiter learns when a synchronous copy drained the queue, and
// so a move of borrowed memory holds every copy that may touch it (submission_hook.h): the linear
// ones, those with a shape (2D, 3D) and those between contexts (peer). With none of these active
// each hook is a forward.
#include "interposer/submission_hook.h"
#include "interposer/sync_hook.h"

#define GS_COPY_HOOK GS_SUBMISSION_HOOK

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

// With a shape or between contexts: no host synchronisation is assumed (the direction is in the
// descriptor), as for the device-to-device copies above.
GS_SUBMISSION_HOOK(cuMemcpy2D_v2, (const CUDA_MEMCPY2D* pCopy), (pCopy))
GS_SUBMISSION_HOOK(cuMemcpy2D_v2_ptds, (const CUDA_MEMCPY2D* pCopy), (pCopy))
GS_SUBMISSION_HOOK(cuMemcpy2DUnaligned_v2, (const CUDA_MEMCPY2D* pCopy), (pCopy))
GS_SUBMISSION_HOOK(cuMemcpy2DUnaligned_v2_ptds, (const CUDA_MEMCPY2D* pCopy), (pCopy))
GS_SUBMISSION_HOOK(cuMemcpy3D_v2, (const CUDA_MEMCPY3D* pCopy), (pCopy))
GS_SUBMISSION_HOOK(cuMemcpy3D_v2_ptds, (const CUDA_MEMCPY3D* pCopy), (pCopy))
GS_SUBMISSION_HOOK(cuMemcpy2DAsync_v2, (const CUDA_MEMCPY2D* pCopy, CUstream hStream), (pCopy, hStream))
GS_SUBMISSION_HOOK(cuMemcpy2DAsync_v2_ptsz, (const CUDA_MEMCPY2D* pCopy, CUstream hStream), (pCopy, hStream))
GS_SUBMISSION_HOOK(cuMemcpy3DAsync_v2, (const CUDA_MEMCPY3D* pCopy, CUstream hStream), (pCopy, hStream))
GS_SUBMISSION_HOOK(cuMemcpy3DAsync_v2_ptsz, (const CUDA_MEMCPY3D* pCopy, CUstream hStream), (pCopy, hStream))
GS_SUBMISSION_HOOK(cuMemcpyPeer,
                   (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext,
                    size_t ByteCount),
                   (dstDevice, dstContext, srcDevice, srcContext, ByteCount))
GS_SUBMISSION_HOOK(cuMemcpyPeer_ptds,
                   (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext,
                    size_t ByteCount),
                   (dstDevice, dstContext, srcDevice, srcContext, ByteCount))
GS_SUBMISSION_HOOK(cuMemcpyPeerAsync,
                   (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext,
                    size_t ByteCount, CUstream hStream),
                   (dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream))
GS_SUBMISSION_HOOK(cuMemcpyPeerAsync_ptsz,
                   (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext,
                    size_t ByteCount, CUstream hStream),
                   (dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream))
GS_SUBMISSION_HOOK(cuMemcpy3DPeer, (const CUDA_MEMCPY3D_PEER* pCopy), (pCopy))
GS_SUBMISSION_HOOK(cuMemcpy3DPeer_ptds, (const CUDA_MEMCPY3D_PEER* pCopy), (pCopy))
GS_SUBMISSION_HOOK(cuMemcpy3DPeerAsync, (const CUDA_MEMCPY3D_PEER* pCopy, CUstream hStream), (pCopy, hStream))
GS_SUBMISSION_HOOK(cuMemcpy3DPeerAsync_ptsz, (const CUDA_MEMCPY3D_PEER* pCopy, CUstream hStream),
                   (pCopy, hStream))
// Batched copies (CUDA 12.8, whose symbol carries a failure index; _v2 from 13.0 without it).
GS_SUBMISSION_HOOK(cuMemcpyBatchAsync,
                   (CUdeviceptr * dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                    CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs, size_t* failIdx,
                    CUstream hStream),
                   (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream))
GS_SUBMISSION_HOOK(cuMemcpyBatchAsync_ptsz,
                   (CUdeviceptr * dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                    CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs, size_t* failIdx,
                    CUstream hStream),
                   (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream))
GS_SUBMISSION_HOOK(cuMemcpyBatchAsync_v2,
                   (CUdeviceptr * dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                    CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs, CUstream hStream),
                   (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream))
GS_SUBMISSION_HOOK(cuMemcpyBatchAsync_v2_ptsz,
                   (CUdeviceptr * dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                    CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs, CUstream hStream),
                   (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream))
GS_SUBMISSION_HOOK(cuMemcpy3DBatchAsync,
                   (size_t numOps, CUDA_MEMCPY3D_BATCH_OP* opList, size_t* failIdx, unsigned long long flags,
                    CUstream hStream),
                   (numOps, opList, failIdx, flags, hStream))
GS_SUBMISSION_HOOK(cuMemcpy3DBatchAsync_ptsz,
                   (size_t numOps, CUDA_MEMCPY3D_BATCH_OP* opList, size_t* failIdx, unsigned long long flags,
                    CUstream hStream),
                   (numOps, opList, failIdx, flags, hStream))
GS_SUBMISSION_HOOK(cuMemcpy3DBatchAsync_v2,
                   (size_t numOps, CUDA_MEMCPY3D_BATCH_OP* opList, unsigned long long flags,
                    CUstream hStream),
                   (numOps, opList, flags, hStream))
GS_SUBMISSION_HOOK(cuMemcpy3DBatchAsync_v2_ptsz,
                   (size_t numOps, CUDA_MEMCPY3D_BATCH_OP* opList, unsigned long long flags,
                    CUstream hStream),
                   (numOps, opList, flags, hStream))
