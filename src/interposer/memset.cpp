// Memsets write device memory without a launch: a move of borrowed memory holds them like launches
// and copies (submission_hook.h), or a memset landing in the old backing during the move would be
// lost. Synchronous and stream-ordered, 1D and 2D, with their per-thread-stream variants.
#include "interposer/submission_hook.h"

GS_SUBMISSION_HOOK(cuMemsetD8_v2, (CUdeviceptr dstDevice, unsigned char uc, size_t N), (dstDevice, uc, N))
GS_SUBMISSION_HOOK(cuMemsetD8_v2_ptds, (CUdeviceptr dstDevice, unsigned char uc, size_t N),
                   (dstDevice, uc, N))
GS_SUBMISSION_HOOK(cuMemsetD16_v2, (CUdeviceptr dstDevice, unsigned short us, size_t N), (dstDevice, us, N))
GS_SUBMISSION_HOOK(cuMemsetD16_v2_ptds, (CUdeviceptr dstDevice, unsigned short us, size_t N),
                   (dstDevice, us, N))
GS_SUBMISSION_HOOK(cuMemsetD32_v2, (CUdeviceptr dstDevice, unsigned int ui, size_t N), (dstDevice, ui, N))
GS_SUBMISSION_HOOK(cuMemsetD32_v2_ptds, (CUdeviceptr dstDevice, unsigned int ui, size_t N),
                   (dstDevice, ui, N))
GS_SUBMISSION_HOOK(cuMemsetD2D8_v2,
                   (CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width, size_t Height),
                   (dstDevice, dstPitch, uc, Width, Height))
GS_SUBMISSION_HOOK(cuMemsetD2D8_v2_ptds,
                   (CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width, size_t Height),
                   (dstDevice, dstPitch, uc, Width, Height))
GS_SUBMISSION_HOOK(cuMemsetD2D16_v2,
                   (CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width, size_t Height),
                   (dstDevice, dstPitch, us, Width, Height))
GS_SUBMISSION_HOOK(cuMemsetD2D16_v2_ptds,
                   (CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width, size_t Height),
                   (dstDevice, dstPitch, us, Width, Height))
GS_SUBMISSION_HOOK(cuMemsetD2D32_v2,
                   (CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width, size_t Height),
                   (dstDevice, dstPitch, ui, Width, Height))
GS_SUBMISSION_HOOK(cuMemsetD2D32_v2_ptds,
                   (CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width, size_t Height),
                   (dstDevice, dstPitch, ui, Width, Height))
GS_SUBMISSION_HOOK(cuMemsetD8Async, (CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream),
                   (dstDevice, uc, N, hStream))
GS_SUBMISSION_HOOK(cuMemsetD8Async_ptsz,
                   (CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream),
                   (dstDevice, uc, N, hStream))
GS_SUBMISSION_HOOK(cuMemsetD16Async, (CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream),
                   (dstDevice, us, N, hStream))
GS_SUBMISSION_HOOK(cuMemsetD16Async_ptsz,
                   (CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream),
                   (dstDevice, us, N, hStream))
GS_SUBMISSION_HOOK(cuMemsetD32Async, (CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream),
                   (dstDevice, ui, N, hStream))
GS_SUBMISSION_HOOK(cuMemsetD32Async_ptsz,
                   (CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream),
                   (dstDevice, ui, N, hStream))
GS_SUBMISSION_HOOK(cuMemsetD2D8Async,
                   (CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width, size_t Height,
                    CUstream hStream),
                   (dstDevice, dstPitch, uc, Width, Height, hStream))
GS_SUBMISSION_HOOK(cuMemsetD2D8Async_ptsz,
                   (CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width, size_t Height,
                    CUstream hStream),
                   (dstDevice, dstPitch, uc, Width, Height, hStream))
GS_SUBMISSION_HOOK(cuMemsetD2D16Async,
                   (CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width, size_t Height,
                    CUstream hStream),
                   (dstDevice, dstPitch, us, Width, Height, hStream))
GS_SUBMISSION_HOOK(cuMemsetD2D16Async_ptsz,
                   (CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width, size_t Height,
                    CUstream hStream),
                   (dstDevice, dstPitch, us, Width, Height, hStream))
GS_SUBMISSION_HOOK(cuMemsetD2D32Async,
                   (CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width, size_t Height,
                    CUstream hStream),
                   (dstDevice, dstPitch, ui, Width, Height, hStream))
GS_SUBMISSION_HOOK(cuMemsetD2D32Async_ptsz,
                   (CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width, size_t Height,
                    CUstream hStream),
                   (dstDevice, dstPitch, ui, Width, Height, hStream))
