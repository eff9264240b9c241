// The few real driver and NVML calls the interposer's core makes itself (not on behalf of the
// application): the seam through which the memory books, the device table and the launch gates
// are simulated exactly in unit tests. The gates' own calls are a limiter::DriverOps, held whole.
#pragma once

#include <cstddef>

#include "abi/cuda_abi.h"
#include "abi/nvml_abi.h"
#include "limiter/driver_ops.h"

namespace gpuslice::interposer {

struct CoreDriver {
  CUresult (*device_uuid)(CUuuid* uuid, CUdevice dev) = nullptr;
  CUresult (*device_total_mem)(std::size_t* bytes, CUdevice dev) = nullptr;
  // How many CUDA devices this process sees.
  CUresult (*device_count)(int* count) = nullptr;
  // The device of the calling thread's current context.
  CUresult (*current_device)(CUdevice* dev) = nullptr;
  // NVML's list of processes with a context on the GPU `uuid` (the driver's view, not ours):
  // fills at most *count entries and stores how many it filled; false when NVML cannot tell.
  bool (*device_processes)(const char* uuid, nvmlProcessInfo_t* out, unsigned* count) = nullptr;
  // NVML's handle of the GPU `uuid` (null when NVML cannot tell), and its SM clock (MHz) and
  // utilization (percent of NVML's last sample period a kernel ran), false when unread: the compute
  // limiter's clock correction (limiter/clock_correction.h). The handle is looked up by the watcher;
  // the clock is read at window closes (1-2 us), never on a launch.
  nvmlDevice_t (*nvml_device)(const char* uuid) = nullptr;
  bool (*sm_clock_mhz)(nvmlDevice_t device, unsigned* mhz) = nullptr;
  bool (*gpu_utilization)(nvmlDevice_t device, unsigned* percent) = nullptr;
  // The GPU's maximum SM clock (MHz), read once: the clock's estimated flat-out reference before a
  // flat-out second is seen (clock_correction.h). Null or false: no estimate.
  bool (*max_sm_clock_mhz)(nvmlDevice_t device, unsigned* mhz) = nullptr;
  // Whether the software power cap is holding the clocks down now (and no applications or locked
  // clocks setting is): the estimate's cut must be the power controller's. Null or false: not capped.
  bool (*power_capped)(nvmlDevice_t device) = nullptr;
  // The launch gates' drains, capture query and timing events: what the compute limiter and the
  // priority gate are given as is.
  limiter::DriverOps gates{};
  // The driver's own reservations (driver_reservations.h): the resident-thread capacity the stack
  // is reserved for, a function's local memory per thread, the graph pool's figures and its trim.
  CUresult (*device_attribute)(int* value, CUdevice_attribute attr, CUdevice dev) = nullptr;
  CUresult (*function_local_bytes)(CUfunction f, int* bytes) = nullptr;
  CUresult (*function_load)(CUfunction f) = nullptr;  // lazy loading's deferred part, now
  CUresult (*graph_mem_attribute)(CUdevice dev, CUgraphMem_attribute attr, std::uint64_t* value) = nullptr;
  CUresult (*graph_mem_trim)(CUdevice dev) = nullptr;
};

// The ops in use: the real ones once lifecycle installed them, or a test's simulation.
const CoreDriver& core_driver();
void set_core_driver(const CoreDriver& ops);  // before any device is attached
// The real library's functions (resolved on first use); only the preloaded library links them.
CoreDriver real_core_driver();

}  // namespace gpuslice::interposer
