// Device-memory hooks (SPEC §3): every allocation path reserves in the container ledger before the
// driver allocates, so processes can never together exceed a quota; frees give the bytes back;
// memory reports show the quota as the total. Without a memory quota each hook is one branch and a
// forward.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "interposer/alloc_table.h"
#include "interposer/hooks.h"
#include "interposer/runtime.h"

namespace gpuslice::interposer {
namespace {

struct Reservation {
  int ledger_dev = -1;  // -1: nothing reserved (device not limited)
  std::uint64_t bytes = 0;
  bool refused = false;
};

// Names the three processes holding the most on the device, so the user knows whom to ask. The
// snapshot is refreshed at most ten times a second: programs commonly retry in a tight loop.
std::string top_users(const DeviceState& d) {
  static std::atomic<std::uint64_t> last_ns{0};
  std::uint64_t now = monotonic_ns();
  std::uint64_t prev = last_ns.load(std::memory_order_relaxed);
  if (now - prev < 100000000ULL || !last_ns.compare_exchange_strong(prev, now)) return {};
  shm::Snapshot snap = ledger()->snapshot();
  std::vector<std::pair<std::uint64_t, const shm::ProcessRow*>> users;
  for (const auto& p : snap.processes) {
    auto dev = static_cast<std::size_t>(d.ledger_dev);
    if (dev < p.used_by_device.size() && p.used_by_device[dev] > 0)
      users.emplace_back(p.used_by_device[dev], &p);
  }
  std::sort(users.begin(), users.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string top;
  for (std::size_t i = 0; i < users.size() && i < 3; ++i) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%spid %d %s %.1f MiB", i ? ", " : "", users[i].second->pid,
                  users[i].second->command.c_str(), static_cast<double>(users[i].first) / (1 << 20));
    top += buf;
  }
  return top;
}

void report_refusal(const DeviceState& d, std::uint64_t bytes) {
  std::string top = top_users(d);
  profiler::log_refused_allocation(d.index, bytes, effective_quota(d), ledger()->used(d.ledger_dev),
                                   top.empty() ? nullptr : top.c_str());
}

Reservation reserve(DeviceState* d, std::uint64_t bytes) {
  if (d == nullptr || d->ledger_dev < 0) return {};
  shm::Ledger* l = ledger();
  // The read-only limits file caps whatever the container set for itself (gpuslice set included).
  std::uint64_t cap = d->file_cap.load(std::memory_order_relaxed);
  if (cap != shm::kUnlimited && l->quota(d->ledger_dev) > cap) l->set_quota(d->ledger_dev, cap);
  if (!l->try_reserve(d->ledger_dev, bytes)) {
    l->count_refusal(d->ledger_dev);
    report_refusal(*d, bytes);
    return {-1, 0, true};
  }
  return {d->ledger_dev, bytes, false};
}

void settle(const Reservation& r, CUresult result, AllocKind kind, std::uint64_t key) {
  if (r.ledger_dev < 0) return;
  if (result == CUDA_SUCCESS) {
    track_allocation(kind, key, AllocEntry{r.bytes, r.ledger_dev});
  } else {
    ledger()->release(r.ledger_dev, r.bytes);
  }
}

bool memory_active() { return g_memory_active.load(std::memory_order_relaxed); }

// Frees through `free_fn` and gives the bytes back. The entry leaves the table *before* the driver
// frees: once freed, the driver may hand the same address to another thread at once, whose entry
// must not be overwritten or removed by ours. The driver call stays inside the in-flight window so a
// footprint reconciliation never sees the driver's figure and our books disagree.
template <class Free>
CUresult release(AllocKind kind, std::uint64_t key, Free&& free_fn) {
  if (!memory_active()) return free_fn();
  AllocationInFlight flight;
  std::optional<AllocEntry> entry = untrack_allocation(kind, key);
  CUresult r = free_fn();
  if (!entry) return r;
  if (r == CUDA_SUCCESS) {
    ledger()->release(entry->ledger_dev, entry->bytes);
  } else {
    track_allocation(kind, key, *entry);  // still allocated: keep accounting for it
  }
  return r;
}

// Allocates through `alloc` (which stores the new handle in `*key`) under the current device's quota.
template <class Alloc>
CUresult allocate(DeviceState* d, std::uint64_t bytes, AllocKind kind, Alloc&& alloc) {
  AllocationInFlight flight;
  Reservation r = reserve(d, bytes);
  if (r.refused) return CUDA_ERROR_OUT_OF_MEMORY;
  std::uint64_t key = 0;
  CUresult res = alloc(&key);
  settle(r, res, kind, key);
  return res;
}

// The linear-memory case of allocate(): the new device pointer is the table key.
template <class Alloc>
CUresult allocate_linear(DeviceState* d, std::uint64_t bytes, CUdeviceptr* dptr, Alloc&& alloc) {
  return allocate(d, bytes, AllocKind::Linear, [&](std::uint64_t* key) {
    CUresult r = alloc();
    if (r == CUDA_SUCCESS) *key = *dptr;
    return r;
  });
}

std::uint64_t format_bytes(CUarray_format f) {
  switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    default:
      return 4;  // 32-bit formats; an unknown (newer) format is counted as 4 bytes per channel
  }
}

std::uint64_t array_bytes(std::uint64_t w, std::uint64_t h, std::uint64_t depth, CUarray_format f,
                          unsigned ch) {
  auto at_least_1 = [](std::uint64_t v) { return v == 0 ? 1 : v; };
  return at_least_1(w) * at_least_1(h) * at_least_1(depth) * format_bytes(f) * at_least_1(ch);
}

}  // namespace
}  // namespace gpuslice::interposer

using gpuslice::interposer::AllocKind;
using gpuslice::interposer::HookId;
using gpuslice::interposer::ProfileScope;
namespace gs = gpuslice::interposer;

#define GS_ENTER(sym)                                                                    \
  ProfileScope gs_scope(HookId::sym);                                                    \
  if (CUresult gs_err = gs::ensure_initialized(); gs_err != CUDA_SUCCESS) return gs_err; \
  auto real = REAL(sym);                                                                 \
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED

GS_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  GS_ENTER(cuMemAlloc_v2);
  if (!gs::memory_active()) return real(dptr, bytesize);
  return gs::allocate_linear(gs::current_device_state(), bytesize, dptr,
                             [&] { return real(dptr, bytesize); });
}

GS_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes, size_t Height,
                                      unsigned int ElementSizeBytes) {
  GS_ENTER(cuMemAllocPitch_v2);
  if (!gs::memory_active()) return real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
  // The pitch is known only afterwards: reserve with the usual 512-byte row alignment; any remainder
  // shows up in the driver's per-process figure, which the footprint reconciliation charges.
  std::uint64_t estimate = ((WidthInBytes + 511) / 512) * 512 * (Height == 0 ? 1 : Height);
  gs::DeviceState* d = gs::current_device_state();
  return gs::allocate_linear(d, estimate, dptr,
                             [&] { return real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes); });
}

GS_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  GS_ENTER(cuMemAllocManaged);
  if (!gs::memory_active()) return real(dptr, bytesize, flags);
  // Managed memory may live on the device at any time: it counts in full against the current device.
  return gs::allocate_linear(gs::current_device_state(), bytesize, dptr,
                             [&] { return real(dptr, bytesize, flags); });
}

GS_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  GS_ENTER(cuMemFree_v2);
  return gs::release(AllocKind::Linear, dptr, [&] { return real(dptr); });
}

#define GS_ALLOC_ASYNC(sym)                                                      \
  GS_EXPORT CUresult sym(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) { \
    GS_ENTER(sym);                                                               \
    if (!gs::memory_active()) return real(dptr, bytesize, hStream);              \
    return gs::allocate_linear(gs::current_device_state(), bytesize, dptr,       \
                               [&] { return real(dptr, bytesize, hStream); });   \
  }
GS_ALLOC_ASYNC(cuMemAllocAsync)
GS_ALLOC_ASYNC(cuMemAllocAsync_ptsz)

#define GS_ALLOC_FROM_POOL(sym)                                                                     \
  GS_EXPORT CUresult sym(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) { \
    GS_ENTER(sym);                                                                                  \
    if (!gs::memory_active()) return real(dptr, bytesize, pool, hStream);                           \
    return gs::allocate_linear(gs::current_device_state(), bytesize, dptr,                          \
                               [&] { return real(dptr, bytesize, pool, hStream); });                \
  }
GS_ALLOC_FROM_POOL(cuMemAllocFromPoolAsync)
GS_ALLOC_FROM_POOL(cuMemAllocFromPoolAsync_ptsz)

#define GS_FREE_ASYNC(sym)                                                            \
  GS_EXPORT CUresult sym(CUdeviceptr dptr, CUstream hStream) {                        \
    GS_ENTER(sym);                                                                    \
    return gs::release(AllocKind::Linear, dptr, [&] { return real(dptr, hStream); }); \
  }
GS_FREE_ASYNC(cuMemFreeAsync)
GS_FREE_ASYNC(cuMemFreeAsync_ptsz)

GS_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                               const CUmemAllocationProp* prop, unsigned long long flags) {
  GS_ENTER(cuMemCreate);
  // VMM physical memory (PyTorch expandable segments, NCCL): counted when created, on the device the
  // properties name; host-located allocations are not device memory.
  if (!gs::memory_active() || prop == nullptr || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return real(handle, size, prop, flags);
  return gs::allocate(gs::device_state(prop->location.id), size, AllocKind::VmmHandle,
                      [&](std::uint64_t* key) {
                        CUresult r = real(handle, size, prop, flags);
                        if (r == CUDA_SUCCESS) *key = *handle;
                        return r;
                      });
}

GS_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  GS_ENTER(cuMemRelease);
  return gs::release(AllocKind::VmmHandle, handle, [&] { return real(handle); });
}

GS_EXPORT CUresult cuArrayCreate_v2(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR* desc) {
  GS_ENTER(cuArrayCreate_v2);
  if (!gs::memory_active() || desc == nullptr) return real(pHandle, desc);
  std::uint64_t bytes = gs::array_bytes(desc->Width, desc->Height, 1, desc->Format, desc->NumChannels);
  return gs::allocate(gs::current_device_state(), bytes, AllocKind::Array, [&](std::uint64_t* key) {
    CUresult r = real(pHandle, desc);
    if (r == CUDA_SUCCESS) *key = reinterpret_cast<std::uint64_t>(*pHandle);
    return r;
  });
}

GS_EXPORT CUresult cuArray3DCreate_v2(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  GS_ENTER(cuArray3DCreate_v2);
  if (!gs::memory_active() || desc == nullptr) return real(pHandle, desc);
  std::uint64_t bytes =
      gs::array_bytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels);
  return gs::allocate(gs::current_device_state(), bytes, AllocKind::Array, [&](std::uint64_t* key) {
    CUresult r = real(pHandle, desc);
    if (r == CUDA_SUCCESS) *key = reinterpret_cast<std::uint64_t>(*pHandle);
    return r;
  });
}

GS_EXPORT CUresult cuArrayDestroy(CUarray hArray) {
  GS_ENTER(cuArrayDestroy);
  return gs::release(AllocKind::Array, reinterpret_cast<std::uint64_t>(hArray), [&] { return real(hArray); });
}

GS_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                          unsigned int numMipmapLevels) {
  GS_ENTER(cuMipmappedArrayCreate);
  if (!gs::memory_active() || desc == nullptr) return real(pHandle, desc, numMipmapLevels);
  // Each level halves every extent (never below 1).
  std::uint64_t bytes = 0;
  for (unsigned level = 0; level < (numMipmapLevels == 0 ? 1 : numMipmapLevels) && level < 64; ++level) {
    bytes += gs::array_bytes(desc->Width >> level, desc->Height >> level, desc->Depth >> level, desc->Format,
                             desc->NumChannels);
  }
  return gs::allocate(gs::current_device_state(), bytes, AllocKind::MipmappedArray, [&](std::uint64_t* key) {
    CUresult r = real(pHandle, desc, numMipmapLevels);
    if (r == CUDA_SUCCESS) *key = reinterpret_cast<std::uint64_t>(*pHandle);
    return r;
  });
}

GS_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) {
  GS_ENTER(cuMipmappedArrayDestroy);
  return gs::release(AllocKind::MipmappedArray, reinterpret_cast<std::uint64_t>(hMipmappedArray),
                     [&] { return real(hMipmappedArray); });
}

GS_EXPORT CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  GS_ENTER(cuMemGetInfo_v2);
  CUresult r = real(free, total);
  if (r != CUDA_SUCCESS || !gs::memory_active() || free == nullptr || total == nullptr) return r;
  gs::DeviceState* d = gs::current_device_state();
  if (d == nullptr || d->ledger_dev < 0) return r;
  std::uint64_t quota = gs::effective_quota(*d);
  if (quota == gpuslice::shm::kUnlimited) return r;
  std::uint64_t used = gs::ledger()->used(d->ledger_dev);
  std::uint64_t virtual_free = used < quota ? quota - used : 0;
  // Never promise more than the card really has free (other tenants use it too).
  if (virtual_free > *free) virtual_free = *free;
  if (quota < *total) *total = quota;
  *free = virtual_free;
  return r;
}

GS_EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  GS_ENTER(cuDeviceTotalMem_v2);
  CUresult r = real(bytes, dev);
  if (r != CUDA_SUCCESS || !gs::memory_active() || bytes == nullptr) return r;
  gs::DeviceState* d = gs::device_state(dev);
  if (d == nullptr || d->ledger_dev < 0) return r;
  std::uint64_t quota = gs::effective_quota(*d);
  if (quota < *bytes) *bytes = quota;
  return r;
}
