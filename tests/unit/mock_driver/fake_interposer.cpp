// Stands in for libgpuslice.so in one test: it exports driver symbols, like an interposer, to
// check that the mock's cuGetProcAddress still hands out the mock's own definitions.
#include "abi/cuda_abi.h"

extern "C" {

CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  (void)dptr;
  (void)bytesize;
  return CUDA_ERROR_UNKNOWN;
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                        unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                        unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra) {
  (void)f, (void)gridDimX, (void)gridDimY, (void)gridDimZ, (void)blockDimX, (void)blockDimY, (void)blockDimZ;
  (void)sharedMemBytes, (void)hStream, (void)kernelParams, (void)extra;
  return CUDA_ERROR_UNKNOWN;
}

}  // extern "C"
