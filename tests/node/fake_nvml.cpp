// A minimal libnvidia-ml.so.1 for the node tests: two GPUs, and a switch that makes every call
// about one GPU fail, to check that the daemon reports it unhealthy.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "abi/nvml_abi.h"

namespace {

struct FakeGpu {
  const char* uuid;
  const char* name;
  unsigned long long total;
  unsigned minor;
};
const FakeGpu kGpus[] = {
    {"GPU-aaaaaaaa-1111-4000-8000-000000000000", "Fake GPU A", 8ULL << 30, 10},
    {"GPU-bbbbbbbb-2222-4000-8000-000000000001", "Fake GPU B", 16ULL << 30, 11},
};
std::atomic<int> g_failing{-1};
std::atomic<bool> g_initialised{false};

int index_of(nvmlDevice_t device) {
  auto value = reinterpret_cast<std::uintptr_t>(device);
  if (value < 1 || value > 2) return -1;
  return static_cast<int>(value - 1);
}

nvmlReturn_t check(nvmlDevice_t device, int* index) {
  if (!g_initialised) return NVML_ERROR_UNINITIALIZED;
  *index = index_of(device);
  if (*index < 0) return NVML_ERROR_INVALID_ARGUMENT;
  if (*index == g_failing.load()) return NVML_ERROR_UNKNOWN;
  return NVML_SUCCESS;
}

}  // namespace

extern "C" {

// Test control: calls about GPU `index` fail from now on (-1: none).
__attribute__((visibility("default"))) void gpuslice_fake_nvml_set_failing(int index) { g_failing = index; }

// Not declared in abi/nvml_abi.h; signature from the NVML reference.
nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int* minor);

nvmlReturn_t nvmlInit_v2(void) {
  g_initialised = true;
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlShutdown(void) {
  g_initialised = false;
  return NVML_SUCCESS;
}
const char* nvmlErrorString(nvmlReturn_t result) {
  return result == NVML_SUCCESS ? "Success" : "Unknown Error";
}
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  if (!g_initialised) return NVML_ERROR_UNINITIALIZED;
  *count = 2;
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  if (!g_initialised) return NVML_ERROR_UNINITIALIZED;
  if (index >= 2) return NVML_ERROR_INVALID_ARGUMENT;
  *device = reinterpret_cast<nvmlDevice_t>(static_cast<std::uintptr_t>(index + 1));
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  int i = 0;
  if (nvmlReturn_t rc = check(device, &i); rc != NVML_SUCCESS) return rc;
  std::snprintf(uuid, length, "%s", kGpus[i].uuid);
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  int i = 0;
  if (nvmlReturn_t rc = check(device, &i); rc != NVML_SUCCESS) return rc;
  std::snprintf(name, length, "%s", kGpus[i].name);
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  int i = 0;
  if (nvmlReturn_t rc = check(device, &i); rc != NVML_SUCCESS) return rc;
  memory->total = kGpus[i].total;
  memory->used = 1ULL << 30;
  memory->free = memory->total - memory->used;
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
  int i = 0;
  if (nvmlReturn_t rc = check(device, &i); rc != NVML_SUCCESS) return rc;
  utilization->gpu = 42;
  utilization->memory = 7;
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int* minor) {
  int i = 0;
  if (nvmlReturn_t rc = check(device, &i); rc != NVML_SUCCESS) return rc;
  *minor = kGpus[i].minor;
  return NVML_SUCCESS;
}

}  // extern "C"
