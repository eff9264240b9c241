// Work-submission hooks: kernels, cooperative kernels and graphs pass the launch gate (when a
// limit or a priority is set) before reaching the driver; host synchronisations tell the gate when
// the application itself drained the queue.
#include "interposer/driver_reservations.h"
#include "interposer/hook_prologue.h"
#include "interposer/launch_gate.h"
#include "interposer/sync_hook.h"
#include "limiter/kernel_cost.h"

namespace gs = gpuslice::interposer;

namespace {
// `what` and the grid identify the launch for the priority gate's costs per kernel (a graph: its
// executable and no grid).
// Returns what the launch owes the gate once the driver took it (nothing when not gated).
inline gs::LaunchTicket gate(CUstream stream, const void* what, unsigned gx = 0, unsigned gy = 0,
                             unsigned gz = 0) {
  if (!gs::launch_gated()) [[likely]]
    return {};
  return gs::gate_launch(stream, gpuslice::limiter::kernel_key(what, gx, gy, gz));
}

// After the driver took the launch: the compute limit's probe may time it (its "after" event).
inline CUresult launched(const gs::LaunchTicket& ticket, CUstream stream, CUresult result) {
  gs::after_launch(ticket, stream);
  return result;
}

// What a launch's stream handle means: a _ptsz entry point reads 0 as the calling thread's default
// stream, the others as the legacy one. The gates pass the handle on to the driver (a capture
// query, an event, a synchronisation), so a _ptsz launch's 0 goes to them as CU_STREAM_PER_THREAD.
constexpr bool kLegacy = false;
constexpr bool kPerThread = true;
inline CUstream gated_stream(CUstream stream, bool per_thread) {
  return per_thread && stream == nullptr ? CU_STREAM_PER_THREAD : stream;
}
}  // namespace

#define GS_LAUNCH_KERNEL(sym, per_thread)                                                                    \
  GS_EXPORT CUresult sym(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,   \
                         unsigned int by, unsigned int bz, unsigned int shmem, CUstream hStream,             \
                         void** kernelParams, void** extra) {                                                \
    GS_CUDA_HOOK_PROLOGUE(sym);                                                                              \
    if (gs::launch_refused(f)) return gs::kRefused;                                                          \
    const CUstream gs_stream = gated_stream(hStream, per_thread);                                            \
    const gs::LaunchTicket gated = gate(gs_stream, f, gx, gy, gz);                                           \
    return launched(gated, gs_stream, real(f, gx, gy, gz, bx, by, bz, shmem, hStream, kernelParams, extra)); \
  }
GS_LAUNCH_KERNEL(cuLaunchKernel, kLegacy)
GS_LAUNCH_KERNEL(cuLaunchKernel_ptsz, kPerThread)

#define GS_LAUNCH_KERNEL_EX(sym, per_thread)                                                              \
  GS_EXPORT CUresult sym(const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra) { \
    GS_CUDA_HOOK_PROLOGUE(sym);                                                                           \
    if (gs::launch_refused(f)) return gs::kRefused;                                                       \
    const CUstream gs_stream = gated_stream(config != nullptr ? config->hStream : nullptr, per_thread);   \
    const gs::LaunchTicket gated =                                                                        \
        gate(gs_stream, f, config != nullptr ? config->gridDimX : 0,                                      \
             config != nullptr ? config->gridDimY : 0, config != nullptr ? config->gridDimZ : 0);         \
    return launched(gated, gs_stream, real(config, f, kernelParams, extra));                              \
  }
GS_LAUNCH_KERNEL_EX(cuLaunchKernelEx, kLegacy)
GS_LAUNCH_KERNEL_EX(cuLaunchKernelEx_ptsz, kPerThread)

#define GS_LAUNCH_COOPERATIVE(sym, per_thread)                                                             \
  GS_EXPORT CUresult sym(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, \
                         unsigned int by, unsigned int bz, unsigned int shmem, CUstream hStream,           \
                         void** kernelParams) {                                                            \
    GS_CUDA_HOOK_PROLOGUE(sym);                                                                            \
    if (gs::launch_refused(f)) return gs::kRefused;                                                        \
    const CUstream gs_stream = gated_stream(hStream, per_thread);                                          \
    const gs::LaunchTicket gated = gate(gs_stream, f, gx, gy, gz);                                         \
    return launched(gated, gs_stream, real(f, gx, gy, gz, bx, by, bz, shmem, hStream, kernelParams));      \
  }
GS_LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel, kLegacy)
GS_LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel_ptsz, kPerThread)

#define GS_GRAPH_LAUNCH(sym, per_thread)                             \
  GS_EXPORT CUresult sym(CUgraphExec hGraphExec, CUstream hStream) { \
    GS_CUDA_HOOK_PROLOGUE(sym);                                      \
    if (gs::graph_refused(hGraphExec)) return gs::kRefused;          \
    const CUstream gs_stream = gated_stream(hStream, per_thread);    \
    const gs::LaunchTicket gated = gate(gs_stream, hGraphExec);      \
    return launched(gated, gs_stream, real(hGraphExec, hStream));    \
  }
GS_GRAPH_LAUNCH(cuGraphLaunch, kLegacy)
GS_GRAPH_LAUNCH(cuGraphLaunch_ptsz, kPerThread)

GS_SYNC_HOOK(cuCtxSynchronize, (void), ())

// CUDA 13's cudaDeviceSynchronize (and cuGetProcAddress("cuCtxSynchronize") at 13000) reach this
// one. It names its context: a sync of a context other than the calling thread's current one says
// nothing about the device the gates look at (they follow the current context), so it is passed on.
GS_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  GS_CUDA_HOOK_PROLOGUE(cuCtxSynchronize_v2);
  bool gated = ::gpuslice::interposer::launch_gated();
  if (gated && ctx != nullptr) {
    CUcontext current = nullptr;
    static auto get_current = REAL_UNHOOKED(Cuda, cuCtxGetCurrent);
    gated = get_current != nullptr && get_current(&current) == CUDA_SUCCESS && current == ctx;
  }
  if (gated) ::gpuslice::interposer::note_sync_begin();
  const CUresult r = real(ctx);
  if (r == CUDA_SUCCESS && gated) ::gpuslice::interposer::note_host_sync();
  return r;
}
GS_SYNC_HOOK(cuStreamSynchronize, (CUstream hStream), (hStream))
GS_SYNC_HOOK(cuStreamSynchronize_ptsz, (CUstream hStream), (hStream))
GS_SYNC_HOOK(cuEventSynchronize, (CUevent hEvent), (hEvent))
