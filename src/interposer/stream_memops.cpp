// Stream memory operations write device memory in stream order without a launch (a 32- or 64-bit
// value, or a batch of them among waits and barriers): a move of borrowed memory holds them like
// launches, copies and memsets (submission_hook.h), or a value landing in the old backing during
// the move would be lost. The CUDA 8 names and the _v2 ones of 11.7, with their per-thread-stream
// variants.
#include "interposer/submission_hook.h"

GS_SUBMISSION_HOOK(cuStreamWriteValue32,
                   (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags),
                   (stream, addr, value, flags))
GS_SUBMISSION_HOOK(cuStreamWriteValue32_ptsz,
                   (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags),
                   (stream, addr, value, flags))
GS_SUBMISSION_HOOK(cuStreamWriteValue32_v2,
                   (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags),
                   (stream, addr, value, flags))
GS_SUBMISSION_HOOK(cuStreamWriteValue32_v2_ptsz,
                   (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags),
                   (stream, addr, value, flags))
GS_SUBMISSION_HOOK(cuStreamWriteValue64,
                   (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags),
                   (stream, addr, value, flags))
GS_SUBMISSION_HOOK(cuStreamWriteValue64_ptsz,
                   (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags),
                   (stream, addr, value, flags))
GS_SUBMISSION_HOOK(cuStreamWriteValue64_v2,
                   (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags),
                   (stream, addr, value, flags))
GS_SUBMISSION_HOOK(cuStreamWriteValue64_v2_ptsz,
                   (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags),
                   (stream, addr, value, flags))
GS_SUBMISSION_HOOK(cuStreamBatchMemOp,
                   (CUstream stream, unsigned int count, CUstreamBatchMemOpParams* paramArray,
                    unsigned int flags),
                   (stream, count, paramArray, flags))
GS_SUBMISSION_HOOK(cuStreamBatchMemOp_ptsz,
                   (CUstream stream, unsigned int count, CUstreamBatchMemOpParams* paramArray,
                    unsigned int flags),
                   (stream, count, paramArray, flags))
GS_SUBMISSION_HOOK(cuStreamBatchMemOp_v2,
                   (CUstream stream, unsigned int count, CUstreamBatchMemOpParams* paramArray,
                    unsigned int flags),
                   (stream, count, paramArray, flags))
GS_SUBMISSION_HOOK(cuStreamBatchMemOp_v2_ptsz,
                   (CUstream stream, unsigned int count, CUstreamBatchMemOpParams* paramArray,
                    unsigned int flags),
                   (stream, count, paramArray, flags))
