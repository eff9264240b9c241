// Process-local state of the simulated libcuda, shared by the files of each API family.
//
// Handles are pointers to the structs below (cuda_abi.h leaves their types incomplete, as the
// real cuda.h does). They come from pools and are never freed while the library is loaded, so a
// stale handle is detected (alive == false) instead of touching freed memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "abi/cuda_abi.h"
#include "mock_config.h"
#include "mock_state.h"

namespace gpuslice::mock {

inline constexpr std::uint32_t kLiveMagic = 0x6d6f636bU;  // "mock"
// Device-memory granularity of the VMM APIs on current GPUs (2 MiB); the mock enforces it too.
inline constexpr std::size_t kVmmGranularity = 2u << 20;

struct HandleBase {
  std::uint32_t magic = kLiveMagic;
  std::atomic<bool> alive{false};
};

}  // namespace gpuslice::mock

struct CUstream_st : gpuslice::mock::HandleBase {
  CUctx_st* context = nullptr;
  std::atomic<std::uint64_t> last_end_ns{0};  // when the last work queued on it finishes
};

struct CUctx_st : gpuslice::mock::HandleBase {
  unsigned device = 0;
  bool primary = false;
  std::uint64_t charged = 0;                  // a further context's own footprint
  std::atomic<bool> launched{false};          // its first launch took its launch resources
  std::uint64_t id = 0;                       // cuCtxGetId: unique per creation, never reused
  std::atomic<std::uint64_t> last_end_ns{0};  // over all its streams
  CUstream_st null_stream;                    // the legacy and per-thread default streams
};

struct CUevent_st : gpuslice::mock::HandleBase {
  CUctx_st* context = nullptr;
  unsigned flags = 0;
  std::atomic<bool> recorded{false};
  std::atomic<std::uint64_t> time_ns{0};
};

struct CUmod_st : gpuslice::mock::HandleBase {
  CUctx_st* context = nullptr;
  std::vector<CUfunc_st*> functions;
  // Device memory of the loaded image ("globals=<N>" in the image text), and what each function's
  // code takes when it is first launched ("lazy=<N>": CUDA_MODULE_LOADING=LAZY, the default).
  std::uint64_t global_bytes = 0;
  std::uint64_t lazy_bytes = 0;
  // A real image's globals (fat binary, cubin) not taken yet: lazy loading takes them at the first
  // launch of any of its functions; CUDA_MODULE_LOADING=EAGER at the load.
  std::uint64_t pending_globals = 0;
  std::uint64_t charged = 0;  // globals plus the lazily loaded functions, uncharged at unload
};

struct CUfunc_st : gpuslice::mock::HandleBase {
  CUmod_st* module = nullptr;
  std::string name;
  std::uint64_t duration_ns = 0;
  std::uint64_t local_bytes = 0;    // per thread: "local_<N>" in the name (big local arrays)
  std::atomic<bool> loaded{false};  // its code is on the device (first launch)
};

struct CUmemPoolHandle_st : gpuslice::mock::HandleBase {
  unsigned device = 0;
  bool is_default = false;
  std::uint64_t used_bytes = 0;  // under Driver::mutex
};

struct CUarray_st : gpuslice::mock::HandleBase {
  CUctx_st* context = nullptr;
  unsigned device = 0;
  std::uint64_t bytes = 0;
};

struct CUmipmappedArray_st : gpuslice::mock::HandleBase {
  CUctx_st* context = nullptr;
  unsigned device = 0;
  std::uint64_t bytes = 0;
};

namespace gpuslice::mock {

template <class T>
class HandlePool {
 public:
  // Caller holds Driver::mutex, fills the fields, then publishes with alive.store(true).
  T* acquire() {
    if (!free_.empty()) {
      T* reused = free_.back();
      free_.pop_back();
      return reused;
    }
    all_.push_back(std::make_unique<T>());
    return all_.back().get();
  }
  void release(T* handle) {
    handle->alive.store(false, std::memory_order_release);
    free_.push_back(handle);
  }
  template <class Fn>
  void for_each_live(Fn&& fn) {
    for (auto& handle : all_) {
      if (handle->alive.load(std::memory_order_relaxed)) fn(handle.get());
    }
  }
  void release_all() {
    free_.clear();
    for (auto& handle : all_) {
      handle->alive.store(false, std::memory_order_release);
      free_.push_back(handle.get());
    }
  }

 private:
  std::vector<std::unique_ptr<T>> all_;
  std::vector<T*> free_;
};

struct LinearAllocation {
  std::size_t bytes = 0;  // usable and charged
  unsigned device = 0;
  CUctx_st* context = nullptr;         // freed with it
  CUmemPoolHandle_st* pool = nullptr;  // stream-ordered allocations only
};

struct PhysicalAllocation {
  int fd = -1;  // memfd, so two mappings of one handle alias like on a GPU (and keep its contents)
  std::size_t size = 0;
  unsigned device = 0;  // the device charged; meaningless when `host`
  bool host = false;    // created with a host location: takes no device memory
  unsigned mappings = 0;
  bool released = false;  // freed once released and unmapped everywhere
  bool imported = false;  // another process's allocation (a shareable handle): charged there
};

struct VmmMapping {
  std::size_t size = 0;
  CUmemGenericAllocationHandle handle = 0;
  bool accessible = false;  // after cuMemSetAccess
};

// The end times of this process's last `depth` kernels on one device, as a ring. A launch whose
// slot still holds unfinished work waits for it: a GPU's launch queue is finite too, so a launch
// loop cannot pile up seconds of backlog. depth 0 = unlimited.
struct LaunchQueue {
  std::unique_ptr<std::atomic<std::uint64_t>[]> ends;
  std::size_t depth = 0;
  std::atomic<std::uint64_t> next{0};
};

// cuCtxSetLimit's values for one device, and what their reservations take beyond the context
// footprint (the defaults' reservations are part of GPUSLICE_MOCK_CONTEXT_BYTES).
inline constexpr unsigned kLimitCount = 5;
inline constexpr std::uint64_t kDefaultLimits[kLimitCount] = {1024, (8u << 20) + (256u << 10), 8u << 20, 2,
                                                              2048};
// Device memory the driver sets aside per pending device-runtime launch.
inline constexpr std::uint64_t kPendingLaunchBytes = 2048;
struct DeviceLimits {
  std::uint64_t value[kLimitCount] = {kDefaultLimits[0], kDefaultLimits[1], kDefaultLimits[2],
                                      kDefaultLimits[3], kDefaultLimits[4]};
  std::uint64_t charged = 0;
};

// The graph memory pool of one device: what graphs' allocation nodes use now, and the physical
// memory the pool holds (it keeps it after the graph finishes, until trimmed).
struct GraphPool {
  std::uint64_t used = 0;
  std::uint64_t used_high = 0;
  std::uint64_t reserved = 0;
  std::uint64_t reserved_high = 0;
};

// A graph (the sum of its allocation nodes) and an executable graph. Their handles are numbers
// the mock never dereferences, so a stale or made-up handle is simply not found.
struct GraphRecord {
  unsigned device = 0;
  std::uint64_t alloc_bytes = 0;
};
struct GraphExecRecord {
  unsigned device = 0;
  std::uint64_t alloc_bytes = 0;
};

enum class Phase : int { Uninitialized = 0, Ready = 1, Deinitialized = 2 };

struct Driver {
  std::mutex mutex;  // everything below except the atomics
  std::atomic<int> phase{static_cast<int>(Phase::Uninitialized)};
  MockConfig config;
  SharedState shared;

  std::map<std::uintptr_t, LinearAllocation> allocations;
  std::map<std::uintptr_t, std::size_t> reservations;  // VMM address ranges
  std::map<std::uintptr_t, VmmMapping> mappings;
  std::unordered_map<CUmemGenericAllocationHandle, PhysicalAllocation> physical;
  std::map<std::uintptr_t, std::size_t> ipc_imports;  // another process's allocations opened here
  CUmemGenericAllocationHandle next_physical_handle = 0x6d6f636b0001ULL;

  HandlePool<CUctx_st> contexts;
  HandlePool<CUstream_st> streams;
  HandlePool<CUevent_st> events;
  HandlePool<CUmod_st> modules;
  HandlePool<CUfunc_st> functions;
  HandlePool<CUmemPoolHandle_st> pools;
  HandlePool<CUarray_st> arrays;
  HandlePool<CUmipmappedArray_st> mipmapped_arrays;

  CUctx_st* primary[kMaxDevices] = {};
  unsigned primary_refs[kMaxDevices] = {};
  unsigned context_count[kMaxDevices] = {};
  std::uint64_t context_charge[kMaxDevices] = {};  // what was charged, uncharged the same
  CUmemPoolHandle_st* default_pool[kMaxDevices] = {};
  DeviceLimits limits[kMaxDevices];
  std::atomic<std::uint64_t> stack_limit[kMaxDevices] = {};  // limits[].value[0], read by launches
  GraphPool graph_pool[kMaxDevices];
  std::map<std::uintptr_t, GraphRecord> graphs;
  std::map<std::uintptr_t, GraphExecRecord> graph_execs;
  std::uintptr_t next_graph_handle = 0x67726170680000ULL;
  LaunchQueue launch_queue[kMaxDevices];
  // Libraries loaded while no context was current (the CUDA 12+ runtime's registered fat binaries):
  // context-independent, their globals taken by every context, at its creation
  // (CUDA_MODULE_LOADING=EAGER) or at its first launch (lazy), and given back with it or the library.
  struct IndependentLibrary {
    std::uint64_t globals = 0;
    std::vector<CUctx_st*> taken_by;
  };
  std::vector<IndependentLibrary*> independent_libraries;
};

Driver& driver();
// Under Driver::mutex: the independent libraries' globals `context` has not taken yet, taken now;
// false when the device cannot hold them.
bool take_library_globals_locked(Driver& state, CUctx_st* context);
// Under Driver::mutex: what `context` took of them given back (the context is being destroyed).
void give_back_library_globals_locked(Driver& state, CUctx_st* context);
bool eager_loading();

inline thread_local CUctx_st* t_current_context = nullptr;

template <class T>
inline bool is_live(const T* handle) {
  return handle != nullptr && handle->magic == kLiveMagic && handle->alive.load(std::memory_order_acquire);
}

inline CUresult check_ready() {
  switch (static_cast<Phase>(driver().phase.load(std::memory_order_acquire))) {
    case Phase::Ready:
      return CUDA_SUCCESS;
    case Phase::Deinitialized:
      return CUDA_ERROR_DEINITIALIZED;
    case Phase::Uninitialized:
      break;
  }
  return CUDA_ERROR_NOT_INITIALIZED;
}

// The calling thread's context, required by nearly every API.
inline CUresult current_context(CUctx_st** out) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  CUctx_st* context = t_current_context;
  if (!is_live(context)) return CUDA_ERROR_INVALID_CONTEXT;
  *out = context;
  return CUDA_SUCCESS;
}

inline constexpr std::uintptr_t kStreamLegacy = 0x1;     // CU_STREAM_LEGACY
inline constexpr std::uintptr_t kStreamPerThread = 0x2;  // CU_STREAM_PER_THREAD

inline bool is_default_stream(CUstream stream) {
  auto value = reinterpret_cast<std::uintptr_t>(stream);
  return value == 0 || value == kStreamLegacy || value == kStreamPerThread;
}

// Resolves a stream argument; the default streams need a current context.
inline CUresult resolve_stream(CUstream stream, CUstream_st** out) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  if (is_default_stream(stream)) {
    CUctx_st* context = nullptr;
    CUresult status = current_context(&context);
    if (status != CUDA_SUCCESS) return status;
    *out = &context->null_stream;
    return CUDA_SUCCESS;
  }
  if (!is_live(stream) || !is_live(stream->context)) return CUDA_ERROR_INVALID_HANDLE;
  *out = stream;
  return CUDA_SUCCESS;
}

// When everything a stream depends on is finished. The legacy default stream waits for all the
// blocking streams of its context, which the mock approximates as all of them.
inline std::uint64_t stream_done_ns(CUstream handle, const CUstream_st* resolved) {
  auto value = reinterpret_cast<std::uintptr_t>(handle);
  if (value == 0 || value == kStreamLegacy) {
    return resolved->context->last_end_ns.load(std::memory_order_acquire);
  }
  return resolved->last_end_ns.load(std::memory_order_acquire);
}

inline void store_max(std::atomic<std::uint64_t>& target, std::uint64_t value) {
  std::uint64_t current = target.load(std::memory_order_relaxed);
  while (current < value && !target.compare_exchange_weak(current, value, std::memory_order_acq_rel)) {
  }
}

// Implemented in cuda_memory.cpp. Whether [address, address + bytes) is usable device memory
// (a linear allocation, or accessible VMM mappings).
bool is_device_range_locked(Driver& state, std::uintptr_t address, std::size_t bytes);
// Whether the address belongs to any linear allocation or VMM reservation (unified addressing).
bool is_device_address_locked(Driver& state, std::uintptr_t address);
// Implemented in cuda_memory.cpp: frees what a context owns when it is destroyed.
void release_context_memory_locked(Driver& state, CUctx_st* context);
// Implemented in cuda_memory.cpp: forgets (with unmap = true also unmaps) all simulated memory.
void drop_all_memory_locked(Driver& state, bool unmap);
// Implemented in cuda_context.cpp: creates the default memory pools once cuInit succeeded.
void create_default_pools_locked(Driver& state);
// Implemented in cuda_limits.cpp: sets one cuCtxSetLimit value of a device, charging or giving back
// the reservation's change; CUDA_ERROR_OUT_OF_MEMORY leaves everything as it was.
CUresult set_limit_locked(Driver& state, unsigned device, unsigned limit, std::uint64_t value);
// Back to the defaults (the device's last context went away), giving every reservation back.
void reset_limits_locked(Driver& state, unsigned device);
// Implemented in cuda_graph.cpp: the graph pool's memory goes with the device's last context.
void reset_graph_pool_locked(Driver& state, unsigned device);
// Backs a launched executable graph's allocations (takes the mutex).
CUresult prepare_graph_launch(CUgraphExec exec);
// Implemented in cuda_launch.cpp: finishes loading a lazily loaded function (its module's "lazy=").
CUresult load_function(CUfunction f, unsigned device);
// Implemented in cuda_launch.cpp: sizes the launch queues from the configuration (cuInit).
void reset_launch_queues_locked(Driver& state);

}  // namespace gpuslice::mock
