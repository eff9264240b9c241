// What the header of `gpuslice top` says about the machine: GPU names and memory from NVML, the
// driver version and the CUDA version the driver supports. Loaded with dlopen at run time, so the
// CLI runs (and shows "-") on a machine without a driver.
#pragma once

#include <string>
#include <vector>

namespace gpuslice::cli {

struct MachineGpu {
  std::string uuid, name;
  unsigned long long memory_total_bytes = 0;
};

struct MachineInfo {
  std::string driver_version;  // empty when NVML is unavailable
  std::string cuda_version;    // "13.0"; empty when libcuda is unavailable
  std::vector<MachineGpu> gpus;
  std::string error;  // why NVML could not be read
};

MachineInfo probe_machine();

}  // namespace gpuslice::cli
