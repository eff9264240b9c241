#include "interposer/nvml_slice.h"

#include <cstdlib>
#include <cstring>

#include "interposer/devices.h"
#include "interposer/hooks.h"
#include "interposer/memory_books.h"
#include "interposer/runtime.h"

namespace gpuslice::interposer {
namespace {

// NVML numbers every GPU of the machine; quotas given per index mean the CUDA index, which
// CUDA_VISIBLE_DEVICES renumbers. -1 when the device is hidden from CUDA (UUID keys still apply).
int cuda_index_of(unsigned nvml_index, const char* uuid) {
  const char* visible = settings().visible_devices.c_str();
  if (*visible == '\0') return static_cast<int>(nvml_index);
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

}  // namespace

int nvml_slice_record(nvmlDevice_t device, unsigned long long physical_total) {
  if (ledger() == nullptr) return -1;
  static auto get_uuid = REAL_UNHOOKED(Nvml, nvmlDeviceGetUUID);
  static auto get_index = REAL_UNHOOKED(Nvml, nvmlDeviceGetIndex);
  char uuid[GPUSLICE_NVML_UUID_LEN] = {};
  unsigned index = 0;
  if (get_uuid == nullptr || get_index == nullptr || get_uuid(device, uuid, sizeof uuid) != NVML_SUCCESS ||
      get_index(device, &index) != NVML_SUCCESS)
    return -1;
  int record = attach_limits(uuid, cuda_index_of(index, uuid), physical_total);
  return record >= 0 ? record : -1;
}

int nvml_slice_record(nvmlDevice_t device) {
  if (ledger() == nullptr) return -1;
  auto get_memory = REAL(nvmlDeviceGetMemoryInfo);
  nvmlMemory_t memory{};
  if (get_memory == nullptr || get_memory(device, &memory) != NVML_SUCCESS) return -1;
  return nvml_slice_record(device, memory.total);
}

bool nvml_slice_active() {
  shm::Ledger* l = ledger();
  return l != nullptr && l->device_count() > 0;
}

void OwnPids::collect() {
  count_ = 0;
  shm::Ledger* l = ledger();
  if (l == nullptr) return;
  const shm::Snapshot snap = l->snapshot();
  for (const shm::ProcessRow& p : snap.processes) {
    if (count_ + 2 > kCapacity) break;
    if (p.pid > 0) pids_[count_++] = static_cast<unsigned>(p.pid);
    if (p.host_pid > 0 && p.host_pid != p.pid) pids_[count_++] = static_cast<unsigned>(p.host_pid);
  }
}

bool OwnPids::contains(unsigned pid) const {
  if (pid == 0) return false;
  for (unsigned i = 0; i < count_; ++i)
    if (pids_[i] == pid) return true;
  return false;
}

// Quota and container use for an NVML device, or false when it has no memory quota.
bool slice_memory(nvmlDevice_t device, unsigned long long physical_total, std::uint64_t* quota,
                  std::uint64_t* used) {
  if (!memory_active()) return false;
  int dev = nvml_slice_record(device, physical_total);
  if (dev < 0) return false;
  gpuslice::shm::Ledger* l = ledger();
  *quota = l->quota(dev);
  if (*quota == gpuslice::shm::kUnlimited) return false;
  *used = l->used(dev);
  return true;
}

}  // namespace gpuslice::interposer
