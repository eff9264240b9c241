// NVML through dlopen/dlsym, typed from the declarations of abi/nvml_abi.h so a wrong signature
// cannot compile.
#include <dlfcn.h>

#include <cstring>
#include <mutex>

#include "abi/nvml_abi.h"
#include "common/log.h"
#include "node/gpus/gpu_source.h"

namespace gpuslice::node {
namespace {

// Not part of abi/nvml_abi.h (the interposer never hooks it); signature from the NVML reference.
using GetMinorNumberFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*);
using GetComputeCapabilityFn = nvmlReturn_t (*)(nvmlDevice_t, int*, int*);
using GetDriverVersionFn = nvmlReturn_t (*)(char*, unsigned int);

struct NvmlApi {
  decltype(&::nvmlInit_v2) init = nullptr;
  decltype(&::nvmlShutdown) shutdown = nullptr;
  decltype(&::nvmlErrorString) error_string = nullptr;
  decltype(&::nvmlDeviceGetCount_v2) get_count = nullptr;
  decltype(&::nvmlDeviceGetHandleByIndex_v2) get_handle = nullptr;
  decltype(&::nvmlDeviceGetUUID) get_uuid = nullptr;
  decltype(&::nvmlDeviceGetName) get_name = nullptr;
  decltype(&::nvmlDeviceGetMemoryInfo) get_memory = nullptr;
  decltype(&::nvmlDeviceGetUtilizationRates) get_utilization = nullptr;
  GetMinorNumberFn get_minor = nullptr;                     // optional
  GetComputeCapabilityFn get_compute_capability = nullptr;  // optional (DRA device attributes)
  GetDriverVersionFn get_driver_version = nullptr;          // optional (DRA device attributes)
};

template <class Fn>
bool load(void* handle, const char* name, Fn& out) {
  out = reinterpret_cast<Fn>(dlsym(handle, name));
  return out != nullptr;
}

class NvmlGpuSource final : public GpuSource {
 public:
  NvmlGpuSource(void* handle, NvmlApi api) : handle_(handle), api_(api) {}
  ~NvmlGpuSource() override {
    api_.shutdown();
    dlclose(handle_);
  }

  Result<std::vector<GpuInfo>> probe() override {
    std::lock_guard lock(mutex_);
    unsigned count = 0;
    nvmlReturn_t rc = api_.get_count(&count);
    if (rc != NVML_SUCCESS && known_.empty()) return make_error("nvmlDeviceGetCount_v2: " + error(rc));
    if (rc != NVML_SUCCESS) count = 0;
    if (known_.size() < count) known_.resize(count);
    std::vector<GpuInfo> gpus;
    for (unsigned i = 0; i < known_.size(); ++i) gpus.push_back(probe_one(i, i < count));
    return gpus;
  }

 private:
  std::string error(nvmlReturn_t rc) const {
    const char* text = api_.error_string ? api_.error_string(rc) : nullptr;
    return std::string(text ? text : "NVML error") + " (" + std::to_string(static_cast<int>(rc)) + ")";
  }

  GpuInfo probe_one(unsigned index, bool present) {
    GpuInfo& last = known_[index];
    GpuInfo info = last;
    info.index = index;
    info.healthy = false;
    if (info.uuid.empty()) info.uuid = "GPU-unknown-" + std::to_string(index);
    if (!present) {
      info.health_error = "no longer listed by NVML";
      return info;
    }
    nvmlDevice_t device = nullptr;
    nvmlReturn_t rc = api_.get_handle(index, &device);
    if (rc != NVML_SUCCESS) {
      info.health_error = "nvmlDeviceGetHandleByIndex_v2: " + error(rc);
      return info;
    }
    char text[GPUSLICE_NVML_UUID_LEN] = {};
    rc = api_.get_uuid(device, text, sizeof text);
    if (rc != NVML_SUCCESS) {
      info.health_error = "nvmlDeviceGetUUID: " + error(rc);
      return info;
    }
    info.uuid = text;
    char name[GPUSLICE_NVML_NAME_LEN] = {};
    if (api_.get_name(device, name, sizeof name) == NVML_SUCCESS) info.name = name;
    nvmlMemory_t memory{};
    rc = api_.get_memory(device, &memory);
    if (rc != NVML_SUCCESS) {
      info.health_error = "nvmlDeviceGetMemoryInfo: " + error(rc);
      return info;
    }
    info.memory_total_bytes = memory.total;
    info.memory_used_bytes = memory.used;
    nvmlUtilization_t utilization{};
    rc = api_.get_utilization(device, &utilization);
    if (rc == NVML_SUCCESS) {
      info.utilization_percent = utilization.gpu;
    } else if (rc == NVML_ERROR_NOT_SUPPORTED || rc == NVML_ERROR_FUNCTION_NOT_FOUND) {
      info.utilization_percent.reset();
    } else {
      info.health_error = "nvmlDeviceGetUtilizationRates: " + error(rc);
      return info;
    }
    unsigned minor = index;
    if (api_.get_minor && api_.get_minor(device, &minor) != NVML_SUCCESS) minor = index;
    info.minor = minor;
    int major_cc = 0, minor_cc = 0;
    if (api_.get_compute_capability &&
        api_.get_compute_capability(device, &major_cc, &minor_cc) == NVML_SUCCESS)
      info.compute_capability = std::to_string(major_cc) + "." + std::to_string(minor_cc);
    char driver[96] = {};
    if (api_.get_driver_version && api_.get_driver_version(driver, sizeof driver) == NVML_SUCCESS)
      info.driver_version = driver;
    info.healthy = true;
    info.health_error.clear();
    last = info;
    return info;
  }

  void* handle_;
  NvmlApi api_;
  std::mutex mutex_;
  std::vector<GpuInfo> known_;  // last good answer per index: identity survives a failing GPU
};

}  // namespace

Result<std::unique_ptr<GpuSource>> open_nvml(const std::string& library) {
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    return make_error("cannot load " + library + ": " + (why ? why : "unknown error"));
  }
  NvmlApi api;
  const char* missing = nullptr;
  if (!load(handle, "nvmlInit_v2", api.init)) missing = "nvmlInit_v2";
  if (!load(handle, "nvmlShutdown", api.shutdown)) missing = "nvmlShutdown";
  if (!load(handle, "nvmlDeviceGetCount_v2", api.get_count)) missing = "nvmlDeviceGetCount_v2";
  if (!load(handle, "nvmlDeviceGetHandleByIndex_v2", api.get_handle))
    missing = "nvmlDeviceGetHandleByIndex_v2";
  if (!load(handle, "nvmlDeviceGetUUID", api.get_uuid)) missing = "nvmlDeviceGetUUID";
  if (!load(handle, "nvmlDeviceGetName", api.get_name)) missing = "nvmlDeviceGetName";
  if (!load(handle, "nvmlDeviceGetMemoryInfo", api.get_memory)) missing = "nvmlDeviceGetMemoryInfo";
  if (!load(handle, "nvmlDeviceGetUtilizationRates", api.get_utilization)) {
    missing = "nvmlDeviceGetUtilizationRates";
  }
  load(handle, "nvmlErrorString", api.error_string);
  load(handle, "nvmlDeviceGetMinorNumber", api.get_minor);
  load(handle, "nvmlDeviceGetCudaComputeCapability", api.get_compute_capability);
  load(handle, "nvmlSystemGetDriverVersion", api.get_driver_version);
  if (missing) {
    dlclose(handle);
    return make_error(library + " lacks " + missing);
  }
  nvmlReturn_t rc = api.init();
  if (rc != NVML_SUCCESS) {
    const char* text = api.error_string ? api.error_string(rc) : nullptr;
    dlclose(handle);
    return make_error("nvmlInit_v2 failed: " + std::string(text ? text : "") + " (" +
                      std::to_string(static_cast<int>(rc)) + ")");
  }
  std::unique_ptr<GpuSource> source = std::make_unique<NvmlGpuSource>(handle, api);
  auto first = source->probe();
  if (!first) return make_error(first.error());
  GS_LOG(Info, "NVML (%s): %zu GPU(s)", library.c_str(), first->size());
  return source;
}

}  // namespace gpuslice::node
