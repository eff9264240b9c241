// Initialisation and context hooks: cuInit brings gpuslice up (failing closed on bad configuration);
// creating a context charges its footprint, as the driver reports it, to the container.
#include "common/log.h"
#include "interposer/devices.h"
#include "interposer/hook_prologue.h"
#include "interposer/memory_books.h"

namespace gs = gpuslice::interposer;

namespace {

// Created around each context-creating call: the first context of the process on a device with a
// ledger record charges its footprint, and (NVML before/after) tells which pid NVML gives this
// process. A device with a record but no memory quota (a compute limit only) is not tracked per
// allocation (its hooks stay a branch and a forward); the watcher's reconciliation then books the
// driver's whole per-process figure, so status and metrics show its real use, not 0.
class ContextCreation {
 public:
  explicit ContextCreation(CUdevice dev) {
    if (gs::ledger() == nullptr) return;
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
    if (gs::reconcile_context_footprint(*device_) == gs::FootprintResult::NotListed && !gs::memory_active()) {
      // The driver's figure for this process is unknown (no NVML, or it cannot tell our pid): count
      // allocations one by one instead, so the books hold them rather than a false 0 (the
      // context's own footprint is then not in them).
      GS_LOG(Info, "device %d: NVML does not list this process; counting its allocations one by one",
             device_->index);
      gs::g_memory_active.store(true, std::memory_order_release);
    }
  }

 private:
  gs::DeviceState* device_ = nullptr;
  gs::ContextProbe probe_;
};

}  // namespace

GS_EXPORT CUresult cuInit(unsigned int Flags) {
  GS_CUDA_HOOK_PROLOGUE(cuInit);
  return real(Flags);
}

GS_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  GS_CUDA_HOOK_PROLOGUE(cuDevicePrimaryCtxRetain);
  ContextCreation creation(dev);
  CUresult r = real(pctx, dev);
  if (r == CUDA_SUCCESS) creation.succeeded();
  return r;
}

GS_EXPORT CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  GS_CUDA_HOOK_PROLOGUE(cuCtxCreate_v2);
  ContextCreation creation(dev);
  CUresult r = real(pctx, flags, dev);
  if (r == CUDA_SUCCESS) creation.succeeded();
  return r;
}

GS_EXPORT CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags,
                                  CUdevice dev) {
  GS_CUDA_HOOK_PROLOGUE(cuCtxCreate_v4);
  ContextCreation creation(dev);
  CUresult r = real(pctx, params, flags, dev);
  if (r == CUDA_SUCCESS) creation.succeeded();
  return r;
}
