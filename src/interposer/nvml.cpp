// NVML hooks: memory queries report the container's quota and use, so nvidia-smi and every
// NVML-based tool show the slice, not the card.
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "interposer/hooks.h"
#include "interposer/runtime.h"

namespace gs = gpuslice::interposer;
using gs::HookId;
using gs::ProfileScope;

namespace {

// NVML numbers every GPU of the machine; quotas given per index mean the CUDA index, which
// CUDA_VISIBLE_DEVICES renumbers. -1 when the device is hidden from CUDA (UUID keys still apply).
int cuda_index_of(unsigned nvml_index, const char* uuid) {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible == nullptr || *visible == '\0') return static_cast<int>(nvml_index);
  int position = 0;
  for (const char* p = visible; *p != '\0'; ++position) {
    const char* end = std::strchr(p, ',');
    std::size_t len = end ? static_cast<std::size_t>(end - p) : std::strlen(p);
    if (len > 0 && (p[0] == 'G' || p[0] == 'M')) {
      if (std::strncmp(uuid, p, len) == 0) return position;  // prefixes of a UUID are allowed
    } else if (len > 0) {
      char* num_end = nullptr;
      long v = std::strtol(p, &num_end, 10);
      if (num_end == p + len && v == static_cast<long>(nvml_index)) return position;
    }
    if (end == nullptr) break;
    p = end + 1;
  }
  return -1;
}

// Quota and container use for an NVML device, or false when it is not limited.
bool virtual_memory(nvmlDevice_t device, unsigned long long physical_total, std::uint64_t* quota,
                    std::uint64_t* used) {
  if (!gs::g_memory_active.load(std::memory_order_relaxed)) return false;
  static auto get_uuid = REAL_UNHOOKED(Nvml, nvmlDeviceGetUUID);
  static auto get_index = REAL_UNHOOKED(Nvml, nvmlDeviceGetIndex);
  char uuid[GPUSLICE_NVML_UUID_LEN] = {};
  unsigned index = 0;
  if (get_uuid == nullptr || get_index == nullptr || get_uuid(device, uuid, sizeof uuid) != NVML_SUCCESS ||
      get_index(device, &index) != NVML_SUCCESS)
    return false;
  int dev = gs::ledger_device_for_uuid(uuid, cuda_index_of(index, uuid), physical_total);
  if (dev < 0) return false;
  gpuslice::shm::Ledger* l = gs::ledger();
  *quota = l->quota(dev);
  if (*quota == gpuslice::shm::kUnlimited) return false;
  *used = l->used(dev);
  return true;
}

}  // namespace

GS_EXPORT nvmlReturn_t nvmlInit_v2(void) {
  ProfileScope scope(HookId::nvmlInit_v2);
  if (gs::ensure_initialized() != CUDA_SUCCESS) return NVML_ERROR_UNINITIALIZED;  // fail closed
  auto real = REAL(nvmlInit_v2);
  return real == nullptr ? NVML_ERROR_DRIVER_NOT_LOADED : real();
}

namespace {

// Both memory queries: the real answer, then the slice's view of it. The slice has no
// driver-reserved part of its own (v2's `reserved` is 0): total = used + free.
template <class Real, class Memory>
nvmlReturn_t virtual_memory_info(Real real, nvmlDevice_t device, Memory* memory) {
  if (gs::ensure_initialized() != CUDA_SUCCESS) return NVML_ERROR_UNINITIALIZED;
  if (real == nullptr) return NVML_ERROR_DRIVER_NOT_LOADED;
  nvmlReturn_t r = real(device, memory);
  std::uint64_t quota = 0;
  std::uint64_t used = 0;
  if (r != NVML_SUCCESS || memory == nullptr || !virtual_memory(device, memory->total, &quota, &used))
    return r;
  if (quota < memory->total) memory->total = quota;
  if constexpr (std::is_same_v<Memory, nvmlMemory_v2_t>) memory->reserved = 0;
  memory->used = used;
  memory->free = used < memory->total ? memory->total - used : 0;
  return r;
}

}  // namespace

GS_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  ProfileScope scope(HookId::nvmlDeviceGetMemoryInfo);
  return virtual_memory_info(REAL(nvmlDeviceGetMemoryInfo), device, memory);
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  ProfileScope scope(HookId::nvmlDeviceGetMemoryInfo_v2);
  return virtual_memory_info(REAL(nvmlDeviceGetMemoryInfo_v2), device, memory);
}
