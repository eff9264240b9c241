#include "cli/gpu_info.h"

#include <dlfcn.h>

namespace gpuslice::cli {
namespace {

// The few NVML/CUDA entry points used, declared by hand: the CLI links no driver header.
using NvmlStatus = int;
using NvmlDevice = void*;
struct NvmlMemory {
  unsigned long long total, free, used;
};

template <class Fn>
Fn symbol(void* library, const char* name) {
  return reinterpret_cast<Fn>(dlsym(library, name));
}

}  // namespace

MachineInfo probe_machine() {
  MachineInfo info;
  if (void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    auto get_version = symbol<int (*)(int*)>(cuda, "cuDriverGetVersion");
    int version = 0;
    if (get_version != nullptr && get_version(&version) == 0 && version > 0) {
      info.cuda_version = std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
    }
    // libcuda stays loaded: unloading a driver is not something it expects.
  }
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (nvml == nullptr) {
    info.error = "NVML not available (libnvidia-ml.so.1)";
    return info;
  }
  auto init = symbol<NvmlStatus (*)()>(nvml, "nvmlInit_v2");
  auto shutdown = symbol<NvmlStatus (*)()>(nvml, "nvmlShutdown");
  auto driver = symbol<NvmlStatus (*)(char*, unsigned)>(nvml, "nvmlSystemGetDriverVersion");
  auto count = symbol<NvmlStatus (*)(unsigned*)>(nvml, "nvmlDeviceGetCount_v2");
  auto handle = symbol<NvmlStatus (*)(unsigned, NvmlDevice*)>(nvml, "nvmlDeviceGetHandleByIndex_v2");
  auto uuid = symbol<NvmlStatus (*)(NvmlDevice, char*, unsigned)>(nvml, "nvmlDeviceGetUUID");
  auto name = symbol<NvmlStatus (*)(NvmlDevice, char*, unsigned)>(nvml, "nvmlDeviceGetName");
  auto memory = symbol<NvmlStatus (*)(NvmlDevice, NvmlMemory*)>(nvml, "nvmlDeviceGetMemoryInfo");
  if (!init || !shutdown || !driver || !count || !handle || !uuid || !name || !memory) {
    info.error = "NVML lacks an entry point";
    return info;
  }
  if (init() != 0) {
    info.error = "nvmlInit failed";
    return info;
  }
  char text[96] = {};
  if (driver(text, sizeof text) == 0) info.driver_version = text;
  unsigned n = 0;
  if (count(&n) == 0) {
    for (unsigned i = 0; i < n && i < 64; ++i) {
      NvmlDevice device = nullptr;
      if (handle(i, &device) != 0) continue;
      MachineGpu gpu;
      char buffer[96] = {};
      if (uuid(device, buffer, sizeof buffer) == 0) gpu.uuid = buffer;
      char gpu_name[96] = {};
      if (name(device, gpu_name, sizeof gpu_name) == 0) gpu.name = gpu_name;
      NvmlMemory mem{};
      if (memory(device, &mem) == 0) gpu.memory_total_bytes = mem.total;
      info.gpus.push_back(std::move(gpu));
    }
  }
  shutdown();
  return info;
}

}  // namespace gpuslice::cli
