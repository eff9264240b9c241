// DeviceModeProbe over NVML, opened for each probe (a refusal is checked rarely; nothing stays loaded).
#include <dlfcn.h>

#include <cstring>

#include "abi/nvml_abi.h"
#include "node/mps/preflight.h"

namespace gpuslice::node::mps {

namespace {

// Not in abi/nvml_abi.h; signatures from the NVML reference.
using GetMigMode = nvmlReturn_t (*)(nvmlDevice_t, unsigned int* current, unsigned int* pending);
using GetComputeMode = nvmlReturn_t (*)(nvmlDevice_t, int* mode);
using GetProcesses = nvmlReturn_t (*)(nvmlDevice_t, unsigned int* count, nvmlProcessInfo_t* infos);

template <class F>
F symbol(void* handle, const char* name) {
  return reinterpret_cast<F>(dlsym(handle, name));
}

Result<std::vector<DeviceMode>> probe(const std::string& library) {
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return make_error("cannot load " + library + ": " + (why != nullptr ? why : "unknown error"));
  }
  auto init = symbol<nvmlReturn_t (*)()>(handle, "nvmlInit_v2");
  auto shutdown = symbol<nvmlReturn_t (*)()>(handle, "nvmlShutdown");
  auto count_fn = symbol<nvmlReturn_t (*)(unsigned int*)>(handle, "nvmlDeviceGetCount_v2");
  auto handle_fn =
      symbol<nvmlReturn_t (*)(unsigned int, nvmlDevice_t*)>(handle, "nvmlDeviceGetHandleByIndex_v2");
  auto mig_fn = symbol<GetMigMode>(handle, "nvmlDeviceGetMigMode");
  auto compute_fn = symbol<GetComputeMode>(handle, "nvmlDeviceGetComputeMode");
  auto processes_fn = symbol<GetProcesses>(handle, "nvmlDeviceGetComputeRunningProcesses_v3");
  if (init == nullptr || count_fn == nullptr || handle_fn == nullptr) {
    dlclose(handle);
    return make_error(library + " lacks nvmlInit_v2/nvmlDeviceGetCount_v2/nvmlDeviceGetHandleByIndex_v2");
  }
  if (nvmlReturn_t rc = init(); rc != NVML_SUCCESS) {
    dlclose(handle);
    return make_error("nvmlInit_v2 failed (" + std::to_string(static_cast<int>(rc)) + ")");
  }
  std::vector<DeviceMode> devices;
  unsigned count = 0;
  Result<std::vector<DeviceMode>> result = make_error("nvmlDeviceGetCount_v2 failed");
  if (count_fn(&count) == NVML_SUCCESS) {
    for (unsigned i = 0; i < count && i < 64; ++i) {
      nvmlDevice_t device = nullptr;
      if (handle_fn(i, &device) != NVML_SUCCESS) continue;
      DeviceMode mode;
      mode.index = i;
      unsigned current = 0, pending = 0;
      // NOT_SUPPORTED on GPUs without MIG: off.
      if (mig_fn != nullptr && mig_fn(device, &current, &pending) == NVML_SUCCESS) mode.mig = current != 0;
      int compute = 0;
      if (compute_fn != nullptr && compute_fn(device, &compute) == NVML_SUCCESS && compute >= 0 &&
          compute <= 3)
        mode.compute = static_cast<DeviceMode::Compute>(compute);
      nvmlProcessInfo_t infos[64];
      unsigned n = 64;
      if (processes_fn != nullptr && processes_fn(device, &n, infos) == NVML_SUCCESS)
        for (unsigned p = 0; p < n && p < 64; ++p) mode.compute_pids.push_back(infos[p].pid);
      devices.push_back(std::move(mode));
    }
    result = std::move(devices);
  }
  if (shutdown != nullptr) shutdown();
  dlclose(handle);
  return result;
}

}  // namespace

DeviceModeProbe nvml_device_modes(std::string library) {
  return [library = std::move(library)]() { return probe(library); };
}

}  // namespace gpuslice::node::mps
