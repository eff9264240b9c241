// The memory the driver takes for itself on behalf of the application, charged to the container
// ledger before the driver takes it and refused past the quota (CUDA_ERROR_OUT_OF_MEMORY):
// - cuCtxSetLimit: the malloc heap and the printf FIFO take their size, the stack its per-thread
//   size times the device's resident-thread capacity, pending device-runtime launches a record each;
// - the stack's automatic growth at launch, for a function whose local memory per thread exceeds
//   the stack limit (its local size is read once per function and cached lock-free);
// - the graph memory pool, which backs graphs' allocation nodes at upload and launch (its reserved
//   figure is the charge; the pool is trimmed before a refusal);
// - module and library images: the globals the image declares for this device are charged before
//   the load (fat binaries, cubins, PTX: module_image.h), refused past the quota; what the load
//   took beyond them is measured around it.
// What a hook could not see is charged by the footprint reconciliation (memory_books.h).
#pragma once

#include <atomic>
#include <cstdint>

#include "abi/cuda_abi.h"
#include "interposer/memory_books.h"
#include "interposer/runtime.h"

namespace gpuslice::interposer {

// The driver's defaults per CUlimit, whose reservations are part of the context footprint (as
// measured on driver 580: stack 1 KiB per thread, printf FIFO 8.25 MiB, heap 8 MiB, 2048 pending
// launches), and what one pending device-runtime launch is estimated to take (the driver took
// nothing for them when measured: an estimate on the safe side, corrected by the reconciliation).
inline constexpr std::uint64_t kDefaultLimits[5] = {1024, (8u << 20) + (256u << 10), 8u << 20, 2, 2048};
inline constexpr std::uint64_t kPendingLaunchBytes = 2048;

// What `value` of `limit` reserves beyond the default's reservation.
std::uint64_t limit_reservation(CUlimit limit, std::uint64_t value, std::uint64_t resident_threads);

// The resident-thread capacity of a device (asked once; a generous bound when the driver cannot say).
std::uint64_t resident_threads(DeviceState& d);

// cuCtxSetLimit on the current context's device: charges the reservation's growth before `set`
// runs, gives back its shrinking after.
CUresult set_limit_charged(CUlimit limit, std::uint64_t value, CUresult (*set)(CUlimit, size_t));

// ---- launches: the function's local memory per thread, cached once per function ----
struct FunctionSlot {
  std::atomic<std::uintptr_t> key{0};  // the CUfunction; 0 free, 1 being filled
  std::atomic<std::uint64_t> local{0};
};
inline constexpr std::size_t kFunctionSlots = 16384;
inline constexpr unsigned kFunctionProbes = 8;
inline constexpr std::uint64_t kLocalUnknown = ~0ULL;
extern FunctionSlot g_function_slots[kFunctionSlots];
// The smallest stack limit over the devices: a function needing no more never grows a stack.
extern std::atomic<std::uint64_t> g_smallest_stack;

inline std::size_t function_hash(std::uintptr_t key) {
  return static_cast<std::size_t>(((key >> 4) * 0x9E3779B97F4A7C15ULL) >> 50) & (kFunctionSlots - 1);
}

inline std::uint64_t cached_local_bytes(CUfunction f) {
  const auto key = reinterpret_cast<std::uintptr_t>(f);
  const std::size_t home = function_hash(key);
  for (unsigned i = 0; i < kFunctionProbes; ++i) {
    const FunctionSlot& slot = g_function_slots[(home + i) & (kFunctionSlots - 1)];
    const std::uintptr_t k = slot.key.load(std::memory_order_acquire);
    if (k == key) return slot.local.load(std::memory_order_relaxed);
    if (k == 0) break;
  }
  return kLocalUnknown;
}

// The launch of `f` on the current device, which may grow the stack: false when that growth is
// refused (the launch then answers CUDA_ERROR_OUT_OF_MEMORY). A function's first launch finishes
// its lazy loading first (cuFuncLoad), measured like a module load and refused at the quota.
bool launch_stack_slow(CUfunction f, std::uint64_t local);
// Called by every launch hook under a memory quota: a hash probe and a compare unless the function
// needs more stack than the smallest one reserved.
inline bool launch_fits(CUfunction f) {
  const std::uint64_t local = cached_local_bytes(f);
  if (local <= g_smallest_stack.load(std::memory_order_relaxed)) [[likely]]
    return true;
  return launch_stack_slow(f, local);
}
inline bool launch_refused(CUfunction f) {
  if (!memory_active()) [[likely]]
    return false;
  return !launch_fits(f);
}
// Module handles (and their functions') may be reused after an unload: forget the cached sizes.
void forget_functions();

// ---- graphs: what allocation nodes need, per graph and per executable graph ----
// Adds an allocation node of `bytes` on `device` to `graph`; refused when it is larger than the quota.
bool note_graph_allocation(CUgraph graph, int device, std::uint64_t bytes);
// An executable graph inherits its graph's needs; destroying either forgets it.
void note_graph_instantiated(CUgraphExec exec, CUgraph graph);
void forget_graph(const void* handle);
// Before uploading or launching `exec`: the graph pool can back its allocations within the quota
// (charging the pool's growth, trimming it first if that is what it takes). Then, after the call,
// the charge follows the pool's reserved figure.
bool graph_pool_fits(CUgraphExec exec);
void graph_pool_settle(CUgraphExec exec);
// The pool's charge follows its reserved figure (after a trim, and every watcher tick).
void sync_graph_charge(DeviceState& d);
// What the launch hooks ask: with no memory quota, one predictable branch. A refused launch
// answers what the driver answers when memory runs out.
inline constexpr CUresult kRefused = CUDA_ERROR_OUT_OF_MEMORY;
inline bool graph_refused(CUgraphExec exec) { return memory_active() && !graph_pool_fits(exec); }
// Gives back what the graph pool holds beyond what graphs use (cuDeviceGraphMemTrim); true when its
// charge went down. The memory books' reclaim (memory_books::set_reclaim).
bool trim_graph_pool(DeviceState& d);

namespace driver_reservations {
// Watcher thread, every 100 ms, before the memory books' tick: under a memory quota, the graph
// pool's charge of each device with a context follows its reserved figure.
void tick();
}  // namespace driver_reservations

// ---- modules ----
// Refuses a load while the container is at its quota; charges what the driver's figure for this
// process grew by across the load (when nothing else moved it meanwhile).
struct ModuleLoad {
  DeviceState* device = nullptr;
  std::uint64_t reserved = 0;  // the image's globals, charged before the load
  bool lazy = false;           // a function's first launch: the globals charged at load come due
  std::uint64_t before = 0;
  std::uint64_t done_before = 0;
  bool measured = false;
  bool refused = false;
};
// `image` (null for a file) is read for the globals it declares (module_image.h): a load that would
// take the container past its quota by them is refused before the driver loads anything.
ModuleLoad begin_module_load(const void* image = nullptr, bool lazy = false);
void end_module_load(const ModuleLoad& load, CUresult result);

template <class Load>
CUresult load_module(const void* image, Load&& load) {
  if (!memory_active()) return load();
  AllocationInFlight flight;
  ModuleLoad m = begin_module_load(image);
  if (m.refused) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult r = load();
  end_module_load(m, r);
  return r;
}

}  // namespace gpuslice::interposer
