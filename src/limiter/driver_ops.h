// The real driver entry points the launch gates (the compute limiter, the priority gate) may use:
// never our hooks, to avoid recursion. The interposer passes them from its driver seam
// (interposer::DriverOps::gates), so a test that simulates the driver simulates them too.
#pragma once

#include <cstdint>

#include "abi/cuda_abi.h"

namespace gpuslice::limiter {

struct DriverOps {
  CUresult (*ctx_synchronize)() = nullptr;
  CUresult (*stream_synchronize)(CUstream) = nullptr;
  // Optional: cuStreamIsCapturing, `capture_status` receiving CUstreamCaptureStatus (0 = none).
  // When set, the limiter never drains while the launching stream is being captured into a graph
  // (a synchronize there would invalidate the capture).
  CUresult (*stream_is_capturing)(CUstream, int* capture_status) = nullptr;
  // Optional, for the priority gate's pipelined in-flight bound (all or none): the unique id of the
  // calling thread's current context (cuCtxGetCurrent + cuCtxGetId), and timing events
  // (cuEventCreate with flags 0, cuEventRecord, cuEventSynchronize, cuEventElapsedTime in ns).
  CUresult (*ctx_id)(std::uint64_t* id) = nullptr;
  CUresult (*event_create)(CUevent* event) = nullptr;
  CUresult (*event_record)(CUevent event, CUstream stream) = nullptr;
  CUresult (*event_synchronize)(CUevent event) = nullptr;
  CUresult (*event_elapsed_ns)(CUevent start, CUevent end, std::uint64_t* ns) = nullptr;
  // Optional, diagnostics only (debug logging): cuEventQuery, CUDA_SUCCESS once the event completed.
  CUresult (*event_query)(CUevent event) = nullptr;
  // Optional, for the busy probe: cuStreamQuery, CUDA_SUCCESS when the stream's work has all run
  // (busy_probe.h: a pair begun on an idle stream also spans the launch's own host time).
  CUresult (*stream_query)(CUstream stream) = nullptr;
};

// Whether `stream` is being captured into a graph (false when the ops cannot tell): a
// synchronisation or an event there would change the capture, so the gates leave it alone.
inline bool stream_capturing(const DriverOps& ops, CUstream stream) {
  if (ops.stream_is_capturing == nullptr) return false;
  int status = 0;
  return ops.stream_is_capturing(stream, &status) == CUDA_SUCCESS && status != 0;
}

}  // namespace gpuslice::limiter
