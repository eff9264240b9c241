// Device memory of the simulated libcuda: every allocation API of cuda_abi.h.
//
// Device pointers are real addresses of MAP_NORESERVE anonymous mappings, so memcpy works and
// untouched memory costs nothing; the bytes are charged to the shared state, which refuses an
// allocation that would overfill the device counting every process, like a real card.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <ctime>

#include "cuda_internal.h"
#include "mock_log.h"

namespace gpuslice::mock {
namespace {

void* map_anonymous(std::size_t bytes) {
  void* memory =
      mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return memory == MAP_FAILED ? nullptr : memory;
}

bool multiply(std::uint64_t a, std::uint64_t b, std::uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}

CUresult alloc_linear(unsigned device, CUctx_st* context, std::size_t bytes, CUmemPoolHandle_st* pool,
                      CUdeviceptr* out) {
  if (out == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& state = driver();
  if (!state.shared.charge(device, bytes, false)) return CUDA_ERROR_OUT_OF_MEMORY;
  void* memory = map_anonymous(bytes);
  if (memory == nullptr) {
    state.shared.uncharge(device, bytes, false);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  auto address = reinterpret_cast<std::uintptr_t>(memory);
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    state.allocations.emplace(address, LinearAllocation{bytes, device, context, pool});
    if (pool != nullptr) pool->used_bytes += bytes;
  }
  *out = static_cast<CUdeviceptr>(address);
  return CUDA_SUCCESS;
}

CUresult free_linear(CUdeviceptr pointer) {
  Driver& state = driver();
  LinearAllocation freed;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    auto found = state.allocations.find(static_cast<std::uintptr_t>(pointer));
    if (found == state.allocations.end()) return CUDA_ERROR_INVALID_VALUE;
    freed = found->second;
    if (is_live(freed.pool)) freed.pool->used_bytes -= freed.bytes;
    state.allocations.erase(found);
  }
  munmap(reinterpret_cast<void*>(pointer), freed.bytes);
  state.shared.uncharge(freed.device, freed.bytes, false);
  return CUDA_SUCCESS;
}

// Bytes of one element of a CUDA array, or 0 for a format or channel count the driver rejects.
std::uint64_t element_bytes(CUarray_format format, unsigned channels) {
  if (channels != 1 && channels != 2 && channels != 4) return 0;
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return channels;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2ULL * channels;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
      return 4ULL * channels;
  }
  return 0;
}

// Bytes of a width x height x depth array (0 height/depth = a lower-dimensional array), or 0 when
// the description is invalid or overflows.
std::uint64_t array_bytes(std::size_t width, std::size_t height, std::size_t depth, CUarray_format format,
                          unsigned channels) {
  std::uint64_t bytes = element_bytes(format, channels);
  if (bytes == 0 || width == 0) return 0;
  if (!multiply(bytes, width, &bytes)) return 0;
  if (!multiply(bytes, height == 0 ? 1 : height, &bytes)) return 0;
  if (!multiply(bytes, depth == 0 ? 1 : depth, &bytes)) return 0;
  return bytes;
}

CUresult create_array(const CUDA_ARRAY3D_DESCRIPTOR& description, CUarray* handle) {
  CUctx_st* context = nullptr;
  CUresult status = current_context(&context);
  if (status != CUDA_SUCCESS) return status;
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::uint64_t bytes = array_bytes(description.Width, description.Height, description.Depth,
                                    description.Format, description.NumChannels);
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& state = driver();
  if (!state.shared.charge(context->device, bytes, false)) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lock(state.mutex);
  CUarray_st* array = state.arrays.acquire();
  array->context = context;
  array->device = context->device;
  array->bytes = bytes;
  array->alive.store(true, std::memory_order_release);
  *handle = array;
  return CUDA_SUCCESS;
}

// The prefix of CUmemPoolProps that says where the pool lives (same layout as the start of
// CUmemAllocationProp); the rest of the struct does not matter to the simulation.
struct PoolPropsPrefix {
  CUmemAllocationType type;
  CUmemAllocationHandleType handle_types;
  CUmemLocation location;
};

bool is_granular(std::uint64_t value) { return value % kVmmGranularity == 0; }

void destroy_physical_locked(Driver& state, CUmemGenericAllocationHandle handle) {
  auto found = state.physical.find(handle);
  if (found == state.physical.end()) return;
  if (found->second.fd >= 0) close(found->second.fd);
  if (!found->second.imported && !found->second.host)
    state.shared.uncharge(found->second.device, found->second.size, false);
  state.physical.erase(found);
}

}  // namespace

bool is_device_range_locked(Driver& state, std::uintptr_t address, std::size_t bytes) {
  if (bytes == 0) return true;
  auto linear = state.allocations.upper_bound(address);
  if (linear != state.allocations.begin()) {
    --linear;
    std::uintptr_t offset = address - linear->first;
    if (address >= linear->first && offset < linear->second.bytes)
      return bytes <= linear->second.bytes - offset;
  }
  auto opened = state.ipc_imports.upper_bound(address);
  if (opened != state.ipc_imports.begin()) {
    --opened;
    std::uintptr_t offset = address - opened->first;
    if (offset < opened->second) return bytes <= opened->second - offset;
  }
  // VMM: the range may span several adjacent mappings (PyTorch's expandable segments do).
  auto mapping = state.mappings.upper_bound(address);
  if (mapping == state.mappings.begin()) return false;
  --mapping;
  std::uintptr_t cursor = address;
  std::size_t remaining = bytes;
  while (mapping != state.mappings.end() && mapping->second.accessible && cursor >= mapping->first &&
         cursor - mapping->first < mapping->second.size) {
    std::size_t available = mapping->second.size - (cursor - mapping->first);
    if (remaining <= available) return true;
    remaining -= available;
    cursor += available;
    ++mapping;
  }
  return false;
}

bool is_device_address_locked(Driver& state, std::uintptr_t address) {
  auto linear = state.allocations.upper_bound(address);
  if (linear != state.allocations.begin()) {
    --linear;
    if (address - linear->first < linear->second.bytes) return true;
  }
  auto reservation = state.reservations.upper_bound(address);
  if (reservation == state.reservations.begin()) return false;
  --reservation;
  return address - reservation->first < reservation->second;
}

void release_context_memory_locked(Driver& state, CUctx_st* context) {
  for (auto it = state.allocations.begin(); it != state.allocations.end();) {
    if (it->second.context != context) {
      ++it;
      continue;
    }
    if (is_live(it->second.pool)) it->second.pool->used_bytes -= it->second.bytes;
    munmap(reinterpret_cast<void*>(it->first), it->second.bytes);
    state.shared.uncharge(it->second.device, it->second.bytes, false);
    it = state.allocations.erase(it);
  }
  state.arrays.for_each_live([&](CUarray_st* array) {
    if (array->context != context) return;
    state.shared.uncharge(array->device, array->bytes, false);
    state.arrays.release(array);
  });
  state.mipmapped_arrays.for_each_live([&](CUmipmappedArray_st* array) {
    if (array->context != context) return;
    state.shared.uncharge(array->device, array->bytes, false);
    state.mipmapped_arrays.release(array);
  });
}

void drop_all_memory_locked(Driver& state, bool unmap) {
  if (unmap) {
    for (const auto& [address, allocation] : state.allocations) {
      munmap(reinterpret_cast<void*>(address), allocation.bytes);
    }
    for (const auto& [address, size] : state.reservations) munmap(reinterpret_cast<void*>(address), size);
  }
  for (const auto& [handle, physical] : state.physical) {
    if (physical.fd >= 0) close(physical.fd);
  }
  state.allocations.clear();
  state.reservations.clear();
  state.mappings.clear();
  state.physical.clear();
}

}  // namespace gpuslice::mock

using namespace gpuslice::mock;

extern "C" {

CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  CUctx_st* context = nullptr;
  CUresult status = current_context(&context);
  if (status != CUDA_SUCCESS) return status;
  return alloc_linear(context->device, context, bytesize, nullptr, dptr);
}

CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes) {
  CUctx_st* context = nullptr;
  CUresult status = current_context(&context);
  if (status != CUDA_SUCCESS) return status;
  if (dptr == nullptr || pPitch == nullptr || WidthInBytes == 0 || Height == 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16)
    return CUDA_ERROR_INVALID_VALUE;
  constexpr std::uint64_t kPitchAlignment = 512;
  if (WidthInBytes > UINT64_MAX - kPitchAlignment) return CUDA_ERROR_INVALID_VALUE;
  std::uint64_t pitch = (WidthInBytes + kPitchAlignment - 1) / kPitchAlignment * kPitchAlignment;
  std::uint64_t bytes = 0;
  if (!multiply(pitch, Height, &bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  status = alloc_linear(context->device, context, bytes, nullptr, dptr);
  if (status == CUDA_SUCCESS) *pPitch = pitch;
  return status;
}

CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  CUctx_st* context = nullptr;
  CUresult status = current_context(&context);
  if (status != CUDA_SUCCESS) return status;
  constexpr unsigned kAttachGlobal = 0x1;
  constexpr unsigned kAttachHost = 0x2;
  if (flags != kAttachGlobal && flags != kAttachHost) return CUDA_ERROR_INVALID_VALUE;
  return alloc_linear(context->device, context, bytesize, nullptr, dptr);
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  // cuMemFree synchronizes: queued kernels may still use the memory.
  if (is_live(t_current_context)) {
    driver().shared.wait_until(t_current_context->last_end_ns.load(std::memory_order_acquire));
  }
  return free_linear(dptr);
}

CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  CUstream_st* stream = nullptr;
  CUresult status = resolve_stream(hStream, &stream);
  if (status != CUDA_SUCCESS) return status;
  const unsigned device = stream->context->device;
  return alloc_linear(device, stream->context, bytesize, driver().default_pool[device], dptr);
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return cuMemAllocAsync(dptr, bytesize, hStream);
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
  CUstream_st* stream = nullptr;
  CUresult status = resolve_stream(hStream, &stream);
  if (status != CUDA_SUCCESS) return status;
  if (!is_live(pool)) return CUDA_ERROR_INVALID_VALUE;
  return alloc_linear(pool->device, stream->context, bytesize, pool, dptr);
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                      CUstream hStream) {
  return cuMemAllocFromPoolAsync(dptr, bytesize, pool, hStream);
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  CUstream_st* stream = nullptr;
  CUresult status = resolve_stream(hStream, &stream);
  if (status != CUDA_SUCCESS) return status;
  return free_linear(dptr);
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) { return cuMemFreeAsync(dptr, hStream); }

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
  (void)minBytesToKeep;  // the mock keeps nothing cached, so there is never anything to trim
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  return is_live(pool) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* poolProps) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  if (pool == nullptr || poolProps == nullptr) return CUDA_ERROR_INVALID_VALUE;
  PoolPropsPrefix props{};
  std::memcpy(&props, poolProps, sizeof(props));
  Driver& state = driver();
  if (props.type != CU_MEM_ALLOCATION_TYPE_PINNED || props.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
      props.location.id < 0 || static_cast<unsigned>(props.location.id) >= state.shared.device_count()) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard<std::mutex> lock(state.mutex);
  CUmemPoolHandle_st* created = state.pools.acquire();
  created->device = static_cast<unsigned>(props.location.id);
  created->is_default = false;
  created->used_bytes = 0;
  created->alive.store(true, std::memory_order_release);
  *pool = created;
  return CUDA_SUCCESS;
}

CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (!is_live(pool) || pool->is_default) return CUDA_ERROR_INVALID_VALUE;
  // Outstanding allocations stay valid until freed, as on a real device.
  for (auto& [address, allocation] : state.allocations) {
    if (allocation.pool == pool) allocation.pool = nullptr;
  }
  state.pools.release(pool);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool_out, CUdevice dev) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  if (pool_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& state = driver();
  if (dev < 0 || static_cast<unsigned>(dev) >= state.shared.device_count()) return CUDA_ERROR_INVALID_DEVICE;
  *pool_out = state.default_pool[dev];
  return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                     unsigned long long flags) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  if (handle == nullptr || prop == nullptr || flags != 0 || size == 0 || !is_granular(size)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  Driver& state = driver();
  // CUDA 13: on a device (id = ordinal), or in host memory: HOST (id ignored; not IPC capable, so no
  // handle types) or HOST_NUMA (id = NUMA node; the mock's host has one, node 0). HOST_NUMA_CURRENT
  // is refused for cuMemCreate. Host memory is no device's: nothing is charged.
  bool host = false;
  switch (prop->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
      if (prop->location.id < 0 || static_cast<unsigned>(prop->location.id) >= state.shared.device_count())
        return CUDA_ERROR_INVALID_DEVICE;
      break;
    case CU_MEM_LOCATION_TYPE_HOST:
      if (prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE) return CUDA_ERROR_INVALID_VALUE;
      host = true;
      break;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
      if (prop->location.id != 0) return CUDA_ERROR_INVALID_VALUE;
      host = true;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  const auto device = host ? 0u : static_cast<unsigned>(prop->location.id);
  if (!host && !state.shared.charge(device, size, false)) return CUDA_ERROR_OUT_OF_MEMORY;
  if (const std::uint64_t rate = state.config.host_pin_bytes_per_s; host && rate != 0) {
    const std::uint64_t ns = static_cast<std::uint64_t>(size) * 1'000'000'000ULL / rate;
    timespec ts{static_cast<time_t>(ns / 1'000'000'000ULL), static_cast<long>(ns % 1'000'000'000ULL)};
    nanosleep(&ts, nullptr);  // real time, outside the driver's lock, as the pinning is
  }
  int fd = memfd_create("gpuslice-mock-vmm", MFD_CLOEXEC);
  if (fd >= 0 && ftruncate(fd, static_cast<off_t>(size)) != 0) {
    close(fd);
    fd = -1;
  }
  if (fd < 0) MOCK_LOG("memfd unavailable: mappings of one VMM handle will not alias");
  std::lock_guard<std::mutex> lock(state.mutex);
  CUmemGenericAllocationHandle created = state.next_physical_handle++;
  state.physical.emplace(created, PhysicalAllocation{fd, size, device, host, 0, false});
  *handle = created;
  return CUDA_SUCCESS;
}

CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                       CUmemAllocationGranularity_flags option) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  if (granularity == nullptr || prop == nullptr || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
      (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
    return CUDA_ERROR_INVALID_VALUE;
  switch (prop->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
      if (prop->location.id < 0 || static_cast<unsigned>(prop->location.id) >= driver().shared.device_count())
        return CUDA_ERROR_INVALID_DEVICE;
      break;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  // One granularity for both, device or host, as the mock enforces it everywhere.
  *granularity = kVmmGranularity;
  return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  auto found = state.physical.find(handle);
  if (found == state.physical.end() || found->second.released) return CUDA_ERROR_INVALID_VALUE;
  found->second.released = true;
  // Memory stays charged while mapped anywhere, as the driver keeps it until the last unmap.
  if (found->second.mappings == 0) destroy_physical_locked(state, handle);
  return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
  (void)addr;  // only a hint, also for the real driver
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  if (ptr == nullptr || flags != 0 || size == 0 || !is_granular(size)) return CUDA_ERROR_INVALID_VALUE;
  if (alignment == 0) alignment = kVmmGranularity;
  if ((alignment & (alignment - 1)) != 0 || size > SIZE_MAX - alignment) return CUDA_ERROR_INVALID_VALUE;
  // Over-reserve, then trim to an aligned window: mmap itself only aligns to pages.
  void* raw = mmap(nullptr, size + alignment, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  auto start = reinterpret_cast<std::uintptr_t>(raw);
  std::uintptr_t aligned = (start + alignment - 1) & ~(static_cast<std::uintptr_t>(alignment) - 1);
  if (aligned > start) munmap(raw, aligned - start);
  std::uintptr_t tail = aligned + size;
  if (start + size + alignment > tail) munmap(reinterpret_cast<void*>(tail), start + size + alignment - tail);
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  state.reservations.emplace(aligned, size);
  *ptr = static_cast<CUdeviceptr>(aligned);
  return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  auto found = state.reservations.find(static_cast<std::uintptr_t>(ptr));
  if (found == state.reservations.end() || found->second != size) return CUDA_ERROR_INVALID_VALUE;
  auto mapped = state.mappings.lower_bound(found->first);
  if (mapped != state.mappings.end() && mapped->first < found->first + size) return CUDA_ERROR_INVALID_VALUE;
  munmap(reinterpret_cast<void*>(ptr), size);
  state.reservations.erase(found);
  return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  if (flags != 0 || size == 0 || !is_granular(ptr) || !is_granular(size) || !is_granular(offset)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  const auto address = static_cast<std::uintptr_t>(ptr);
  auto reservation = state.reservations.upper_bound(address);
  if (reservation == state.reservations.begin()) return CUDA_ERROR_INVALID_VALUE;
  --reservation;
  if (address - reservation->first >= reservation->second ||
      size > reservation->second - (address - reservation->first)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto physical = state.physical.find(handle);
  if (physical == state.physical.end() || physical->second.released) return CUDA_ERROR_INVALID_HANDLE;
  if (offset > physical->second.size || size > physical->second.size - offset)
    return CUDA_ERROR_INVALID_VALUE;
  auto next = state.mappings.lower_bound(address);
  if (next != state.mappings.end() && next->first < address + size) return CUDA_ERROR_INVALID_VALUE;
  if (next != state.mappings.begin()) {
    auto previous = std::prev(next);
    if (previous->first + previous->second.size > address) return CUDA_ERROR_INVALID_VALUE;
  }
  // Inaccessible until cuMemSetAccess, like device memory.
  void* mapped = physical->second.fd >= 0
                     ? mmap(reinterpret_cast<void*>(address), size, PROT_NONE, MAP_SHARED | MAP_FIXED,
                            physical->second.fd, static_cast<off_t>(offset))
                     : mmap(reinterpret_cast<void*>(address), size, PROT_NONE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  if (mapped == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  ++physical->second.mappings;
  state.mappings.emplace(address, VmmMapping{size, handle, false});
  return CUDA_SUCCESS;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  const auto address = static_cast<std::uintptr_t>(ptr);
  const std::uintptr_t end = address + size;
  // The range must consist of whole mappings, starting at one.
  auto first = state.mappings.find(address);
  if (first == state.mappings.end()) return CUDA_ERROR_INVALID_VALUE;
  auto last = first;
  std::uintptr_t covered = address;
  while (last != state.mappings.end() && last->first == covered && covered < end) {
    covered += last->second.size;
    ++last;
  }
  if (covered != end) return CUDA_ERROR_INVALID_VALUE;
  mmap(reinterpret_cast<void*>(address), size, PROT_NONE,
       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  for (auto it = first; it != last;) {
    auto physical = state.physical.find(it->second.handle);
    if (physical != state.physical.end() && --physical->second.mappings == 0 && physical->second.released) {
      destroy_physical_locked(state, it->second.handle);
    }
    it = state.mappings.erase(it);
  }
  return CUDA_SUCCESS;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  if (desc == nullptr || count == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& state = driver();
  constexpr int kAccessRead = 0x1;
  constexpr int kAccessReadWrite = 0x3;
  int widest = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || desc[i].location.id < 0 ||
        static_cast<unsigned>(desc[i].location.id) >= state.shared.device_count()) {
      return CUDA_ERROR_INVALID_DEVICE;
    }
    if (desc[i].flags != 0 && desc[i].flags != kAccessRead && desc[i].flags != kAccessReadWrite) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    widest = desc[i].flags > widest ? desc[i].flags : widest;
  }
  std::lock_guard<std::mutex> lock(state.mutex);
  const auto address = static_cast<std::uintptr_t>(ptr);
  auto first = state.mappings.upper_bound(address);
  if (first == state.mappings.begin()) return CUDA_ERROR_INVALID_VALUE;
  --first;
  // Every byte of the range must be mapped.
  std::uintptr_t covered = address;
  auto it = first;
  while (it != state.mappings.end() && it->first <= covered && covered < address + size) {
    if (covered >= it->first + it->second.size) break;
    covered = it->first + it->second.size;
    ++it;
  }
  if (covered < address + size) return CUDA_ERROR_INVALID_VALUE;
  int protection = widest == kAccessReadWrite ? PROT_READ | PROT_WRITE
                   : widest == kAccessRead    ? PROT_READ
                                              : PROT_NONE;
  if (mprotect(reinterpret_cast<void*>(address), size, protection) != 0) return CUDA_ERROR_INVALID_VALUE;
  for (auto mapping = first; mapping != it; ++mapping) mapping->second.accessible = widest != 0;
  return CUDA_SUCCESS;
}

CUresult cuArrayCreate_v2(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR* pAllocateArray) {
  if (pAllocateArray == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR description{pAllocateArray->Width,  pAllocateArray->Height,      0,
                                      pAllocateArray->Format, pAllocateArray->NumChannels, 0};
  return create_array(description, pHandle);
}

CUresult cuArray3DCreate_v2(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* pAllocateArray) {
  if (pAllocateArray == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return create_array(*pAllocateArray, pHandle);
}

CUresult cuArrayDestroy(CUarray hArray) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (!is_live(hArray)) return CUDA_ERROR_INVALID_HANDLE;
  state.shared.uncharge(hArray->device, hArray->bytes, false);
  state.arrays.release(hArray);
  return CUDA_SUCCESS;
}

CUresult cuMipmappedArrayCreate(CUmipmappedArray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* pMipmappedArrayDesc,
                                unsigned int numMipmapLevels) {
  CUctx_st* context = nullptr;
  CUresult status = current_context(&context);
  if (status != CUDA_SUCCESS) return status;
  if (pHandle == nullptr || pMipmappedArrayDesc == nullptr || numMipmapLevels == 0)
    return CUDA_ERROR_INVALID_VALUE;
  const CUDA_ARRAY3D_DESCRIPTOR& desc = *pMipmappedArrayDesc;
  std::uint64_t total = 0;
  for (unsigned level = 0; level < numMipmapLevels; ++level) {
    auto shrink = [level](std::size_t extent) -> std::size_t {
      if (extent == 0) return 0;
      std::size_t reduced = level >= 64 ? 0 : extent >> level;
      return reduced == 0 ? 1 : reduced;
    };
    std::uint64_t bytes = array_bytes(shrink(desc.Width), shrink(desc.Height), shrink(desc.Depth),
                                      desc.Format, desc.NumChannels);
    if (bytes == 0 || __builtin_add_overflow(total, bytes, &total)) return CUDA_ERROR_INVALID_VALUE;
  }
  Driver& state = driver();
  if (!state.shared.charge(context->device, total, false)) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lock(state.mutex);
  CUmipmappedArray_st* array = state.mipmapped_arrays.acquire();
  array->context = context;
  array->device = context->device;
  array->bytes = total;
  array->alive.store(true, std::memory_order_release);
  *pHandle = array;
  return CUDA_SUCCESS;
}

CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (!is_live(hMipmappedArray)) return CUDA_ERROR_INVALID_HANDLE;
  state.shared.uncharge(hMipmappedArray->device, hMipmappedArray->bytes, false);
  state.mipmapped_arrays.release(hMipmappedArray);
  return CUDA_SUCCESS;
}

}  // extern "C"
