// First versions of driver entry points whose later versions cuda_abi.h declares. The real
// libcuda still exports them and cuGetProcAddress hands them to callers asking for an old
// cudaVersion, so the mock exports them too. Device pointers and sizes are 32-bit here.
#pragma once

#include "abi/cuda_abi.h"

namespace gpuslice::mock {

struct LegacyArrayDescriptor {
  unsigned int Width;
  unsigned int Height;
  CUarray_format Format;
  unsigned int NumChannels;
};

struct LegacyArray3DDescriptor {
  unsigned int Width;
  unsigned int Height;
  unsigned int Depth;
  CUarray_format Format;
  unsigned int NumChannels;
  unsigned int Flags;
};

}  // namespace gpuslice::mock

extern "C" {

typedef unsigned int CUdeviceptr_v1;

CUresult cuMemAlloc(CUdeviceptr_v1* dptr, unsigned int bytesize);
CUresult cuMemAllocPitch(CUdeviceptr_v1* dptr, unsigned int* pPitch, unsigned int WidthInBytes,
                         unsigned int Height, unsigned int ElementSizeBytes);
CUresult cuMemFree(CUdeviceptr_v1 dptr);
CUresult cuMemGetInfo(unsigned int* free, unsigned int* total);
CUresult cuDeviceTotalMem(unsigned int* bytes, CUdevice dev);
CUresult cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev);
CUresult cuCtxDestroy(CUcontext ctx);
CUresult cuDevicePrimaryCtxRelease(CUdevice dev);
CUresult cuArrayCreate(CUarray* pHandle, const gpuslice::mock::LegacyArrayDescriptor* pAllocateArray);
CUresult cuArray3DCreate(CUarray* pHandle, const gpuslice::mock::LegacyArray3DDescriptor* pAllocateArray);
CUresult cuMemcpyHtoD(CUdeviceptr_v1 dstDevice, const void* srcHost, unsigned int ByteCount);
CUresult cuMemcpyDtoH(void* dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount);
CUresult cuMemcpyDtoD(CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice, unsigned int ByteCount);
CUresult cuMemcpyHtoDAsync(CUdeviceptr_v1 dstDevice, const void* srcHost, unsigned int ByteCount,
                           CUstream hStream);
CUresult cuMemcpyDtoHAsync(void* dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount, CUstream hStream);
CUresult cuStreamDestroy(CUstream hStream);
CUresult cuEventDestroy(CUevent hEvent);
CUresult cuEventElapsedTime(float* pMilliseconds, CUevent hStart, CUevent hEnd);

}  // extern "C"
