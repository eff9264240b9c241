// Initialisation and context hooks: cuInit brings gpuslice up (failing closed on bad configuration);
// creating a context charges its footprint, as the driver reports it, to the container.
#include "common/log.h"
#include "interposer/hooks.h"
#include "interposer/runtime.h"

namespace gs = gpuslice::interposer;
using gs::HookId;
using gs::ProfileScope;

namespace {

// Created around each context-creating call: the first context of the process on a limited
// device charges its footprint, and (NVML before/after) tells which pid NVML gives this process.
class ContextCreation {
 public:
  explicit ContextCreation(CUdevice dev) {
    if (!gs::g_memory_active.load(std::memory_order_relaxed)) return;
    device_ = gs::device_state(dev);
    if (device_ == nullptr || device_->ledger_dev < 0) {
      device_ = nullptr;
      return;
    }
    probe_.before_creation(*device_);
  }

  void succeeded() {
    if (device_ == nullptr || device_->has_context.exchange(true)) return;
    probe_.after_creation(*device_);
    gs::reconcile_context_footprint(*device_);
  }

 private:
  gs::DeviceState* device_ = nullptr;
  gs::ContextProbe probe_;
};

}  // namespace

GS_EXPORT CUresult cuInit(unsigned int Flags) {
  ProfileScope scope(HookId::cuInit);
  if (CUresult err = gs::ensure_initialized(); err != CUDA_SUCCESS) return err;
  auto real = REAL(cuInit);
  if (real == nullptr) {
    GS_LOG(Error, "libcuda.so.1 could not be loaded: no driver");
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  return real(Flags);
}

GS_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  ProfileScope scope(HookId::cuDevicePrimaryCtxRetain);
  if (CUresult err = gs::ensure_initialized(); err != CUDA_SUCCESS) return err;
  auto real = REAL(cuDevicePrimaryCtxRetain);
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  ContextCreation creation(dev);
  CUresult r = real(pctx, dev);
  if (r == CUDA_SUCCESS) creation.succeeded();
  return r;
}

GS_EXPORT CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  ProfileScope scope(HookId::cuCtxCreate_v2);
  if (CUresult err = gs::ensure_initialized(); err != CUDA_SUCCESS) return err;
  auto real = REAL(cuCtxCreate_v2);
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  ContextCreation creation(dev);
  CUresult r = real(pctx, flags, dev);
  if (r == CUDA_SUCCESS) creation.succeeded();
  return r;
}

GS_EXPORT CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags,
                                  CUdevice dev) {
  ProfileScope scope(HookId::cuCtxCreate_v4);
  if (CUresult err = gs::ensure_initialized(); err != CUDA_SUCCESS) return err;
  auto real = REAL(cuCtxCreate_v4);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  ContextCreation creation(dev);
  CUresult r = real(pctx, params, flags, dev);
  if (r == CUDA_SUCCESS) creation.succeeded();
  return r;
}
