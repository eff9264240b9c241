// Work-submission hooks: kernels, cooperative kernels and graphs pass the compute limiter's gate
// (when a limit is set) before reaching the driver. Host synchronisation hooks tell the limiter
// when the application itself drained the queue.
#include "interposer/hooks.h"
#include "interposer/launch_gate.h"
#include "interposer/runtime.h"

using gpuslice::interposer::HookId;
using gpuslice::interposer::ProfileScope;

namespace {
inline void gate(CUstream stream) {
  if (gpuslice::interposer::g_compute_active.load(std::memory_order_relaxed)) [[unlikely]]
    gpuslice::interposer::gate_launch(stream);
}
}  // namespace

#define GS_LAUNCH_KERNEL(sym)                                                                              \
  GS_EXPORT CUresult sym(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, \
                         unsigned int by, unsigned int bz, unsigned int shmem, CUstream hStream,           \
                         void** kernelParams, void** extra) {                                              \
    ProfileScope scope(HookId::sym);                                                                       \
    auto real = REAL(sym);                                                                                 \
    if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;                                                \
    gate(hStream);                                                                                         \
    return real(f, gx, gy, gz, bx, by, bz, shmem, hStream, kernelParams, extra);                           \
  }
GS_LAUNCH_KERNEL(cuLaunchKernel)
GS_LAUNCH_KERNEL(cuLaunchKernel_ptsz)

#define GS_LAUNCH_KERNEL_EX(sym)                                                                          \
  GS_EXPORT CUresult sym(const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra) { \
    ProfileScope scope(HookId::sym);                                                                      \
    auto real = REAL(sym);                                                                                \
    if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;                                               \
    gate(config != nullptr ? config->hStream : nullptr);                                                  \
    return real(config, f, kernelParams, extra);                                                          \
  }
GS_LAUNCH_KERNEL_EX(cuLaunchKernelEx)
GS_LAUNCH_KERNEL_EX(cuLaunchKernelEx_ptsz)

#define GS_LAUNCH_COOPERATIVE(sym)                                                                         \
  GS_EXPORT CUresult sym(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, \
                         unsigned int by, unsigned int bz, unsigned int shmem, CUstream hStream,           \
                         void** kernelParams) {                                                            \
    ProfileScope scope(HookId::sym);                                                                       \
    auto real = REAL(sym);                                                                                 \
    if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;                                                \
    gate(hStream);                                                                                         \
    return real(f, gx, gy, gz, bx, by, bz, shmem, hStream, kernelParams);                                  \
  }
GS_LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel)
GS_LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel_ptsz)

#define GS_GRAPH_LAUNCH(sym)                                         \
  GS_EXPORT CUresult sym(CUgraphExec hGraphExec, CUstream hStream) { \
    ProfileScope scope(HookId::sym);                                 \
    auto real = REAL(sym);                                           \
    if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;          \
    gate(hStream);                                                   \
    return real(hGraphExec, hStream);                                \
  }
GS_GRAPH_LAUNCH(cuGraphLaunch)
GS_GRAPH_LAUNCH(cuGraphLaunch_ptsz)

GS_HOOK_NOTIFYING_SYNC(cuCtxSynchronize, (void), ())
GS_HOOK_NOTIFYING_SYNC(cuStreamSynchronize, (CUstream hStream), (hStream))
GS_HOOK_NOTIFYING_SYNC(cuStreamSynchronize_ptsz, (CUstream hStream), (hStream))
GS_HOOK_NOTIFYING_SYNC(cuEventSynchronize, (CUevent hEvent), (hEvent))
