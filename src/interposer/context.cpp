// Initialisation and context hooks: cuInit brings gpuslice up (failing closed on bad configuration,
// including a limit for a device the process does not see, or a guarantee above its device's limit);
// creating a context charges its footprint to the container before the driver creates it (the first
// on a device as another process measured it, or as the driver reports it; every further one as
// measured for a context here), and destroying one gives it back.
#include "interposer/context_books.h"
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
  // Both are checked, so that every configuration problem is logged at once.
  const bool named_exist = r != CUDA_SUCCESS || gs::named_devices_exist();
  const bool guarantees_fit = r != CUDA_SUCCESS || gs::guarantees_within_limits();
  if (!named_exist || !guarantees_fit) {
    gs::fail_closed();
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  return r;
}

namespace {

// Creates a context through `create` (which answers the driver's result and stores the handle in
// *out) with its footprint charged first.
template <class Handle, class Create>
CUresult create_charged(CUdevice dev, gs::ContextKind kind, Handle* out, Create&& create) {
  gs::ContextCreation creation(dev, kind);
  if (creation.refused()) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult r = create();
  if (r == CUDA_SUCCESS) creation.succeeded(out != nullptr ? *out : nullptr);
  return r;
}

}  // namespace

GS_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  GS_CUDA_HOOK_PROLOGUE(cuDevicePrimaryCtxRetain);
  return create_charged(dev, gs::ContextKind::Primary, pctx, [&] { return real(pctx, dev); });
}

GS_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  GS_CUDA_HOOK_PROLOGUE(cuDevicePrimaryCtxRelease_v2);
  return gs::release_primary_context(dev, real);
}

GS_EXPORT CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  GS_CUDA_HOOK_PROLOGUE(cuCtxCreate_v2);
  return create_charged(dev, gs::ContextKind::Created, pctx, [&] { return real(pctx, flags, dev); });
}

GS_EXPORT CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* paramsArray, int numParams,
                                  unsigned int flags, CUdevice dev) {
  GS_CUDA_HOOK_PROLOGUE(cuCtxCreate_v3);
  return create_charged(dev, gs::ContextKind::Created, pctx,
                        [&] { return real(pctx, paramsArray, numParams, flags, dev); });
}

GS_EXPORT CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags,
                                  CUdevice dev) {
  GS_CUDA_HOOK_PROLOGUE(cuCtxCreate_v4);
  return create_charged(dev, gs::ContextKind::Created, pctx, [&] { return real(pctx, params, flags, dev); });
}

GS_EXPORT CUresult cuGreenCtxCreate(CUgreenCtx* phCtx, CUdevResourceDesc desc, CUdevice dev,
                                    unsigned int flags) {
  GS_CUDA_HOOK_PROLOGUE(cuGreenCtxCreate);
  return create_charged(dev, gs::ContextKind::Green, phCtx, [&] { return real(phCtx, desc, dev, flags); });
}

GS_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
  GS_CUDA_HOOK_PROLOGUE(cuCtxDestroy_v2);
  return gs::destroy_charged_context(gs::ContextKind::Created, ctx, [&] { return real(ctx); });
}

GS_EXPORT CUresult cuGreenCtxDestroy(CUgreenCtx hCtx) {
  GS_CUDA_HOOK_PROLOGUE(cuGreenCtxDestroy);
  return gs::destroy_charged_context(gs::ContextKind::Green, hCtx, [&] { return real(hCtx); });
}
