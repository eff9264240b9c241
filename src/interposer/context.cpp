// Initialisation and context hooks: cuInit brings gpuslice up (failing closed on bad configuration,
// including a limit for a device the process does not see);
// creating a context charges its footprint, as the driver reports it, to the container.
#include "interposer/devices.h"
#include "interposer/hook_prologue.h"
#include "interposer/lifecycle.h"
#include "interposer/memory_books.h"
#include "interposer/mps_client.h"

namespace gs = gpuslice::interposer;

GS_EXPORT CUresult cuInit(unsigned int Flags) {
  GS_CUDA_HOOK_PROLOGUE(cuInit);
  gs::mps_client::init_begin();  // under MPS the first one may wait for another user's server
  CUresult r = real(Flags);
  gs::mps_client::init_end();
  if (r == CUDA_SUCCESS && !gs::named_devices_exist()) {
    gs::fail_closed();
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  return r;
}

GS_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  GS_CUDA_HOOK_PROLOGUE(cuDevicePrimaryCtxRetain);
  gs::ContextCreation creation(dev);
  if (creation.refused()) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = real(pctx, dev);
  if (r == CUDA_SUCCESS) creation.succeeded();
  return r;
}

GS_EXPORT CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  GS_CUDA_HOOK_PROLOGUE(cuCtxCreate_v2);
  gs::ContextCreation creation(dev);
  if (creation.refused()) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = real(pctx, flags, dev);
  if (r == CUDA_SUCCESS) creation.succeeded();
  return r;
}

GS_EXPORT CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags,
                                  CUdevice dev) {
  GS_CUDA_HOOK_PROLOGUE(cuCtxCreate_v4);
  gs::ContextCreation creation(dev);
  if (creation.refused()) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = real(pctx, params, flags, dev);
  if (r == CUDA_SUCCESS) creation.succeeded();
  return r;
}
