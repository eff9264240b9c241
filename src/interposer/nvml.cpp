// NVML hooks: memory queries report the container's quota and use (nvml_slice.h), so nvidia-smi
// and every NVML-based tool show the slice, not the card. Process lists: nvml_processes.cpp; utilisation:
// nvml_utilization.cpp.
#include "interposer/hook_prologue.h"
#include "interposer/memory_books.h"
#include "interposer/nvml_slice.h"

namespace gs = gpuslice::interposer;

GS_EXPORT nvmlReturn_t nvmlInit_v2(void) {
  GS_NVML_HOOK_PROLOGUE(nvmlInit_v2);
  return real();
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  GS_NVML_HOOK_PROLOGUE(nvmlDeviceGetMemoryInfo);
  nvmlReturn_t r = real(device, memory);
  if (r == NVML_SUCCESS) gs::apply_slice_memory_view(device, memory);
  return r;
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  GS_NVML_HOOK_PROLOGUE(nvmlDeviceGetMemoryInfo_v2);
  nvmlReturn_t r = real(device, memory);
  if (r == NVML_SUCCESS) gs::apply_slice_memory_view(device, memory);
  return r;
}

// BAR1 is the window through which the host and peers map device memory, not memory of its own; a
// tenant can map at most what it may allocate, so the window is shown no larger than the quota.
// NVML cannot say whose mappings fill it: `used` stays the driver's figure, bounded by that total.
GS_EXPORT nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t* bar1) {
  GS_NVML_HOOK_PROLOGUE(nvmlDeviceGetBAR1MemoryInfo);
  nvmlReturn_t r = real(device, bar1);
  if (r != NVML_SUCCESS || bar1 == nullptr || !gs::memory_active()) return r;
  auto get_memory = REAL(nvmlDeviceGetMemoryInfo);
  nvmlMemory_t memory{};
  std::uint64_t quota = 0;
  std::uint64_t used = 0;
  if (get_memory == nullptr || get_memory(device, &memory) != NVML_SUCCESS ||
      !gs::slice_memory(device, memory.total, &quota, &used))
    return r;
  if (quota < bar1->bar1Total) bar1->bar1Total = quota;
  if (bar1->bar1Used > bar1->bar1Total) bar1->bar1Used = bar1->bar1Total;
  bar1->bar1Free = bar1->bar1Total - bar1->bar1Used;
  return r;
}
