// The few real driver and NVML calls the interposer's core makes itself (not on behalf of the
// application): the seam through which the memory books, the device table and the compute gate
// are simulated exactly in unit tests, like limiter::DriverOps for the compute limiter.
#pragma once

#include <cstddef>

#include "abi/cuda_abi.h"
#include "abi/nvml_abi.h"

namespace gpuslice::interposer {

struct DriverOps {
  CUresult (*device_uuid)(CUuuid* uuid, CUdevice dev) = nullptr;
  CUresult (*device_total_mem)(std::size_t* bytes, CUdevice dev) = nullptr;
  // How many CUDA devices this process sees.
  CUresult (*device_count)(int* count) = nullptr;
  // The device of the calling thread's current context.
  CUresult (*current_device)(CUdevice* dev) = nullptr;
  // NVML's list of processes with a context on the GPU `uuid` (the driver's view, not ours):
  // fills at most *count entries and stores how many it filled; false when NVML cannot tell.
  bool (*device_processes)(const char* uuid, nvmlProcessInfo_t* out, unsigned* count) = nullptr;
  // The compute gate's drains, and its query whether a stream is being captured into a graph (such a
  // stream must never be drained): `status` receives CUstreamCaptureStatus, 0 = none.
  CUresult (*ctx_synchronize)() = nullptr;
  CUresult (*stream_synchronize)(CUstream stream) = nullptr;
  CUresult (*stream_capture_status)(CUstream stream, int* status) = nullptr;
  // The priority gate's pipelined in-flight bound (all or none): the current context's unique id
  // and timing events (see limiter::DriverOps).
  CUresult (*ctx_id)(std::uint64_t* id) = nullptr;
  CUresult (*event_create)(CUevent* event) = nullptr;
  CUresult (*event_record)(CUevent event, CUstream stream) = nullptr;
  CUresult (*event_synchronize)(CUevent event) = nullptr;
  CUresult (*event_elapsed_ns)(CUevent start, CUevent end, std::uint64_t* ns) = nullptr;
  CUresult (*event_query)(CUevent event) = nullptr;
  CUresult (*stream_query)(CUstream stream) = nullptr;  // the busy probe's idle-stream test
  // The driver's own reservations (driver_reservations.h): the resident-thread capacity the stack
  // is reserved for, a function's local memory per thread, the graph pool's figures and its trim.
  CUresult (*device_attribute)(int* value, CUdevice_attribute attr, CUdevice dev) = nullptr;
  CUresult (*function_local_bytes)(CUfunction f, int* bytes) = nullptr;
  CUresult (*function_load)(CUfunction f) = nullptr;  // lazy loading's deferred part, now
  CUresult (*graph_mem_attribute)(CUdevice dev, CUgraphMem_attribute attr, std::uint64_t* value) = nullptr;
  CUresult (*graph_mem_trim)(CUdevice dev) = nullptr;
};

// The ops in use: the real ones once lifecycle installed them, or a test's simulation.
const DriverOps& driver_ops();
void set_driver_ops(const DriverOps& ops);  // before any device is attached
// The real library's functions (resolved on first use); only the preloaded library links them.
DriverOps real_driver_ops();

}  // namespace gpuslice::interposer
