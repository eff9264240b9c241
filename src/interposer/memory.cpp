// Device-memory hooks: every allocation path reserves in the container ledger before the driver
// allocates (memory_books.h); frees give the bytes back; memory reports show the quota as the
// total. Without a memory quota each hook is one branch and a forward. Above a memory guarantee,
// cuMemAlloc memory is borrowed (reclaim/reclaim_engine.h) and what could not be moved is refused.
#include "interposer/devices.h"
#include "interposer/hook_prologue.h"
#include "interposer/memory_books.h"
#include "interposer/reclaim/reclaim_engine.h"

using gpuslice::interposer::AllocKind;
namespace gs = gpuslice::interposer;

GS_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  GS_CUDA_HOOK_PROLOGUE(cuMemAlloc_v2);
  if (!gs::memory_active()) return real(dptr, bytesize);
  gs::DeviceState* d = gs::current_device_state();
  const std::uint64_t bytes = gs::device_granular(bytesize);
  if (gs::reclaim::above_guarantee(d, bytes)) return gs::reclaim::allocate_borrowed(d, bytes, dptr);
  return gs::allocate_linear(d, bytes, dptr, [&] { return real(dptr, bytesize); });
}

GS_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes, size_t Height,
                                      unsigned int ElementSizeBytes) {
  GS_CUDA_HOOK_PROLOGUE(cuMemAllocPitch_v2);
  if (!gs::memory_active()) return real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
  // The pitch is known only afterwards: reserve with the usual 512-byte row alignment; any remainder
  // shows up in the driver's per-process figure, which the footprint reconciliation charges.
  std::uint64_t estimate = ((WidthInBytes + 511) / 512) * 512 * (Height == 0 ? 1 : Height);
  gs::DeviceState* d = gs::current_device_state();
  if (gs::reclaim::refuse_unmovable(d, gs::device_granular(estimate))) return CUDA_ERROR_OUT_OF_MEMORY;
  return gs::allocate_linear(d, gs::device_granular(estimate), dptr,
                             [&] { return real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes); });
}

GS_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  GS_CUDA_HOOK_PROLOGUE(cuMemAllocManaged);
  if (!gs::memory_active()) return real(dptr, bytesize, flags);
  // Managed memory may live on the device at any time: it counts in full against the current device.
  if (gs::reclaim::refuse_unmovable(gs::current_device_state(), bytesize)) return CUDA_ERROR_OUT_OF_MEMORY;
  return gs::allocate_linear(gs::current_device_state(), bytesize, dptr,
                             [&] { return real(dptr, bytesize, flags); });
}

GS_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  GS_CUDA_HOOK_PROLOGUE(cuMemFree_v2);
  if (CUresult freed = CUDA_SUCCESS; gs::reclaim::free_borrowed(dptr, &freed)) return freed;
  return gs::release(AllocKind::Linear, dptr, [&] { return real(dptr); });
}

#define GS_ALLOC_ASYNC(sym)                                                      \
  GS_EXPORT CUresult sym(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) { \
    GS_CUDA_HOOK_PROLOGUE(sym);                                                  \
    if (!gs::memory_active()) return real(dptr, bytesize, hStream);              \
    if (gs::reclaim::refuse_unmovable(gs::current_device_state(), bytesize))     \
      return CUDA_ERROR_OUT_OF_MEMORY;                                           \
    return gs::allocate_linear(gs::current_device_state(), bytesize, dptr,       \
                               [&] { return real(dptr, bytesize, hStream); });   \
  }
GS_ALLOC_ASYNC(cuMemAllocAsync)
GS_ALLOC_ASYNC(cuMemAllocAsync_ptsz)

#define GS_ALLOC_FROM_POOL(sym)                                                                     \
  GS_EXPORT CUresult sym(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) { \
    GS_CUDA_HOOK_PROLOGUE(sym);                                                                     \
    if (!gs::memory_active()) return real(dptr, bytesize, pool, hStream);                           \
    if (gs::reclaim::refuse_unmovable(gs::current_device_state(), bytesize))                        \
      return CUDA_ERROR_OUT_OF_MEMORY;                                                              \
    return gs::allocate_linear(gs::current_device_state(), bytesize, dptr,                          \
                               [&] { return real(dptr, bytesize, pool, hStream); });                \
  }
GS_ALLOC_FROM_POOL(cuMemAllocFromPoolAsync)
GS_ALLOC_FROM_POOL(cuMemAllocFromPoolAsync_ptsz)

#define GS_FREE_ASYNC(sym)                                                            \
  GS_EXPORT CUresult sym(CUdeviceptr dptr, CUstream hStream) {                        \
    GS_CUDA_HOOK_PROLOGUE(sym);                                                       \
    return gs::release(AllocKind::Linear, dptr, [&] { return real(dptr, hStream); }); \
  }
GS_FREE_ASYNC(cuMemFreeAsync)
GS_FREE_ASYNC(cuMemFreeAsync_ptsz)

GS_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                               const CUmemAllocationProp* prop, unsigned long long flags) {
  GS_CUDA_HOOK_PROLOGUE(cuMemCreate);
  // VMM physical memory (PyTorch expandable segments, NCCL): counted when created, on the device the
  // properties name; host-located allocations are not device memory.
  if (!gs::memory_active() || prop == nullptr || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return real(handle, size, prop, flags);
  if (gs::reclaim::refuse_unmovable(gs::device_state(prop->location.id), size))
    return CUDA_ERROR_OUT_OF_MEMORY;
  return gs::allocate(gs::device_state(prop->location.id), size, AllocKind::VmmHandle,
                      [&](std::uint64_t* key) {
                        CUresult r = real(handle, size, prop, flags);
                        if (r == CUDA_SUCCESS) *key = *handle;
                        return r;
                      });
}

GS_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  GS_CUDA_HOOK_PROLOGUE(cuMemRelease);
  return gs::release(AllocKind::VmmHandle, handle, [&] { return real(handle); });
}

// CUDA IPC: the exporter's allocation is charged to the exporter, once; opening it here charges
// nothing, and what the driver may count of it here is left out of this process's footprint.
GS_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  GS_CUDA_HOOK_PROLOGUE(cuIpcOpenMemHandle_v2);
  return gs::open_imported(pdptr, [&] { return real(pdptr, handle, Flags); });
}

GS_EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  GS_CUDA_HOOK_PROLOGUE(cuIpcOpenMemHandle);
  return gs::open_imported(pdptr, [&] { return real(pdptr, handle, Flags); });
}

GS_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  GS_CUDA_HOOK_PROLOGUE(cuIpcCloseMemHandle);
  if (gs::ledger() == nullptr) return real(dptr);
  gs::AllocationInFlight flight;
  CUresult r = real(dptr);
  if (r == CUDA_SUCCESS) gs::close_imported(dptr);
  return r;
}

GS_EXPORT CUresult cuArrayCreate_v2(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR* desc) {
  GS_CUDA_HOOK_PROLOGUE(cuArrayCreate_v2);
  if (!gs::memory_active() || desc == nullptr) return real(pHandle, desc);
  std::uint64_t bytes = gs::array_bytes(desc->Width, desc->Height, 1, desc->Format, desc->NumChannels);
  if (gs::reclaim::refuse_unmovable(gs::current_device_state(), bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  return gs::allocate(gs::current_device_state(), bytes, AllocKind::Array, [&](std::uint64_t* key) {
    CUresult r = real(pHandle, desc);
    if (r == CUDA_SUCCESS) *key = reinterpret_cast<std::uint64_t>(*pHandle);
    return r;
  });
}

GS_EXPORT CUresult cuArray3DCreate_v2(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  GS_CUDA_HOOK_PROLOGUE(cuArray3DCreate_v2);
  if (!gs::memory_active() || desc == nullptr) return real(pHandle, desc);
  std::uint64_t bytes =
      gs::array_bytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels);
  if (gs::reclaim::refuse_unmovable(gs::current_device_state(), bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  return gs::allocate(gs::current_device_state(), bytes, AllocKind::Array, [&](std::uint64_t* key) {
    CUresult r = real(pHandle, desc);
    if (r == CUDA_SUCCESS) *key = reinterpret_cast<std::uint64_t>(*pHandle);
    return r;
  });
}

GS_EXPORT CUresult cuArrayDestroy(CUarray hArray) {
  GS_CUDA_HOOK_PROLOGUE(cuArrayDestroy);
  return gs::release(AllocKind::Array, reinterpret_cast<std::uint64_t>(hArray), [&] { return real(hArray); });
}

GS_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                          unsigned int numMipmapLevels) {
  GS_CUDA_HOOK_PROLOGUE(cuMipmappedArrayCreate);
  if (!gs::memory_active() || desc == nullptr) return real(pHandle, desc, numMipmapLevels);
  // Each level halves every extent (never below 1).
  std::uint64_t bytes = 0;
  for (unsigned level = 0; level < (numMipmapLevels == 0 ? 1 : numMipmapLevels) && level < 64; ++level) {
    bytes += gs::array_bytes(desc->Width >> level, desc->Height >> level, desc->Depth >> level, desc->Format,
                             desc->NumChannels);
  }
  if (gs::reclaim::refuse_unmovable(gs::current_device_state(), bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  return gs::allocate(gs::current_device_state(), bytes, AllocKind::MipmappedArray, [&](std::uint64_t* key) {
    CUresult r = real(pHandle, desc, numMipmapLevels);
    if (r == CUDA_SUCCESS) *key = reinterpret_cast<std::uint64_t>(*pHandle);
    return r;
  });
}

GS_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) {
  GS_CUDA_HOOK_PROLOGUE(cuMipmappedArrayDestroy);
  return gs::release(AllocKind::MipmappedArray, reinterpret_cast<std::uint64_t>(hMipmappedArray),
                     [&] { return real(hMipmappedArray); });
}

GS_EXPORT CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  GS_CUDA_HOOK_PROLOGUE(cuMemGetInfo_v2);
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
  GS_CUDA_HOOK_PROLOGUE(cuDeviceTotalMem_v2);
  CUresult r = real(bytes, dev);
  if (r != CUDA_SUCCESS || !gs::memory_active() || bytes == nullptr) return r;
  gs::DeviceState* d = gs::device_state(dev);
  if (d == nullptr || d->ledger_dev < 0) return r;
  std::uint64_t quota = gs::effective_quota(*d);
  if (quota < *bytes) *bytes = quota;
  return r;
}
