// The container's share of each engine of a device over the last second, in percent: the sum over
// its processes of their samples in the driver's per-process utilisation (each process's samples
// averaged), clamped to 100 (nvml_utilization.cpp hands it out).
#pragma once

#include "abi/nvml_abi.h"

namespace gpuslice::interposer {

struct OwnShare {
  unsigned sm = 0;
  unsigned memory = 0;
  unsigned encoder = 0;
  unsigned decoder = 0;
};

// NVML_ERROR_NOT_SUPPORTED where the driver keeps no per-process samples; zeros when no process
// used the device in the last second.
nvmlReturn_t own_share(nvmlDevice_t device, OwnShare* share);

}  // namespace gpuslice::interposer
