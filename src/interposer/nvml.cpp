// NVML hooks: memory queries report the container's quota and use, so nvidia-smi and every
// NVML-based tool show the slice, not the card. Process lists: nvml_processes.cpp; utilisation:
// nvml_utilization.cpp.
#include <type_traits>

#include "interposer/hook_prologue.h"
#include "interposer/memory_books.h"
#include "interposer/nvml_slice.h"

namespace gs = gpuslice::interposer;

namespace {

// Quota and container use for an NVML device, or false when it has no memory quota.
bool virtual_memory(nvmlDevice_t device, unsigned long long physical_total, std::uint64_t* quota,
                    std::uint64_t* used) {
  if (!gs::memory_active()) return false;
  int dev = gs::nvml_slice_record(device, physical_total);
  if (dev < 0) return false;
  gpuslice::shm::Ledger* l = gs::ledger();
  *quota = l->quota(dev);
  if (*quota == gpuslice::shm::kUnlimited) return false;
  *used = l->used(dev);
  return true;
}

}  // namespace

GS_EXPORT nvmlReturn_t nvmlInit_v2(void) {
  GS_NVML_HOOK_PROLOGUE(nvmlInit_v2);
  return real();
}

namespace {

// Both memory queries: the real answer, then the slice's view of it, consistent with
// cuMemGetInfo_v2: total = the quota (or the card, if smaller); used = the container's use (at
// most total); free = what is left of the quota, but never more than the card really has free
// (other tenants and the driver's own reservation use it too). The part of the slice the card
// cannot give now is v2's `reserved`, so used + free + reserved = total and reserved <= quota; v1
// has no such field and, as NVML's v1 does with the driver's reservation, counts it in `used`
// (used + free = total). A v2 struct of the wrong version is the real library's to refuse.
template <class Real, class Memory>
nvmlReturn_t virtual_memory_info(Real real, nvmlDevice_t device, Memory* memory) {
  nvmlReturn_t r = real(device, memory);
  std::uint64_t quota = 0;
  std::uint64_t used = 0;
  if (r != NVML_SUCCESS || memory == nullptr || !virtual_memory(device, memory->total, &quota, &used))
    return r;
  const std::uint64_t card_free = memory->free;
  if (quota < memory->total) memory->total = quota;
  if (used > memory->total) used = memory->total;
  const std::uint64_t slice_free = memory->total - used;
  memory->free = slice_free < card_free ? slice_free : card_free;
  if constexpr (std::is_same_v<Memory, nvmlMemory_v2_t>) {
    memory->used = used;
    memory->reserved = slice_free - memory->free;
  } else {
    memory->used = memory->total - memory->free;
  }
  return r;
}

}  // namespace

GS_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  GS_NVML_HOOK_PROLOGUE(nvmlDeviceGetMemoryInfo);
  return virtual_memory_info(real, device, memory);
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  GS_NVML_HOOK_PROLOGUE(nvmlDeviceGetMemoryInfo_v2);
  return virtual_memory_info(real, device, memory);
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
      !virtual_memory(device, memory.total, &quota, &used))
    return r;
  if (quota < bar1->bar1Total) bar1->bar1Total = quota;
  if (bar1->bar1Used > bar1->bar1Total) bar1->bar1Used = bar1->bar1Total;
  bar1->bar1Free = bar1->bar1Total - bar1->bar1Used;
  return r;
}
