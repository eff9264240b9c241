// First versions of entry points (legacy_abi.h). The mock's device addresses never fit in 32
// bits, so the legacy allocators refuse with CUDA_ERROR_NOT_SUPPORTED; everything else forwards
// to the current version.
#include <algorithm>
#include <climits>

#include "legacy_abi.h"

extern "C" {

CUresult cuMemAlloc(CUdeviceptr_v1* dptr, unsigned int bytesize) {
  (void)dptr;
  (void)bytesize;
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemAllocPitch(CUdeviceptr_v1* dptr, unsigned int* pPitch, unsigned int WidthInBytes,
                         unsigned int Height, unsigned int ElementSizeBytes) {
  (void)dptr;
  (void)pPitch;
  (void)WidthInBytes;
  (void)Height;
  (void)ElementSizeBytes;
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemFree(CUdeviceptr_v1 dptr) { return cuMemFree_v2(dptr); }

CUresult cuMemGetInfo(unsigned int* free, unsigned int* total) {
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  CUresult status = cuMemGetInfo_v2(&free_bytes, &total_bytes);
  if (status != CUDA_SUCCESS) return status;
  *free = static_cast<unsigned int>(std::min<size_t>(free_bytes, UINT_MAX));
  *total = static_cast<unsigned int>(std::min<size_t>(total_bytes, UINT_MAX));
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem(unsigned int* bytes, CUdevice dev) {
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  size_t total = 0;
  CUresult status = cuDeviceTotalMem_v2(&total, dev);
  if (status == CUDA_SUCCESS) *bytes = static_cast<unsigned int>(std::min<size_t>(total, UINT_MAX));
  return status;
}

CUresult cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return cuCtxCreate_v2(pctx, flags, dev);
}

CUresult cuCtxDestroy(CUcontext ctx) { return cuCtxDestroy_v2(ctx); }

CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return cuDevicePrimaryCtxRelease_v2(dev); }

CUresult cuArrayCreate(CUarray* pHandle, const gpuslice::mock::LegacyArrayDescriptor* pAllocateArray) {
  if (pAllocateArray == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY_DESCRIPTOR description{pAllocateArray->Width, pAllocateArray->Height, pAllocateArray->Format,
                                    pAllocateArray->NumChannels};
  return cuArrayCreate_v2(pHandle, &description);
}

CUresult cuArray3DCreate(CUarray* pHandle, const gpuslice::mock::LegacyArray3DDescriptor* pAllocateArray) {
  if (pAllocateArray == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR description{pAllocateArray->Width,       pAllocateArray->Height,
                                      pAllocateArray->Depth,       pAllocateArray->Format,
                                      pAllocateArray->NumChannels, pAllocateArray->Flags};
  return cuArray3DCreate_v2(pHandle, &description);
}

CUresult cuMemcpyHtoD(CUdeviceptr_v1 dstDevice, const void* srcHost, unsigned int ByteCount) {
  return cuMemcpyHtoD_v2(dstDevice, srcHost, ByteCount);
}

CUresult cuMemcpyDtoH(void* dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount) {
  return cuMemcpyDtoH_v2(dstHost, srcDevice, ByteCount);
}

CUresult cuMemcpyDtoD(CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice, unsigned int ByteCount) {
  return cuMemcpyDtoD_v2(dstDevice, srcDevice, ByteCount);
}

CUresult cuMemcpyHtoDAsync(CUdeviceptr_v1 dstDevice, const void* srcHost, unsigned int ByteCount,
                           CUstream hStream) {
  return cuMemcpyHtoDAsync_v2(dstDevice, srcHost, ByteCount, hStream);
}

CUresult cuMemcpyDtoHAsync(void* dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount,
                           CUstream hStream) {
  return cuMemcpyDtoHAsync_v2(dstHost, srcDevice, ByteCount, hStream);
}

CUresult cuStreamDestroy(CUstream hStream) { return cuStreamDestroy_v2(hStream); }

CUresult cuEventDestroy(CUevent hEvent) { return cuEventDestroy_v2(hEvent); }

CUresult cuEventElapsedTime(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  return cuEventElapsedTime_v2(pMilliseconds, hStart, hEnd);
}

}  // extern "C"
