// The memory books of this process: every allocation reserves in the container ledger before the
// driver allocates (so processes can never together exceed a quota), settles once the driver
// answered, and gives its bytes back when freed; the context footprint the driver reports (NVML)
// is charged on top. The quota itself is the ledger's (devices.h keeps request and cap there).
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>

#include "abi/cuda_abi.h"
#include "interposer/alloc_table.h"
#include "interposer/reclaim/reclaim_ask.h"
#include "interposer/runtime.h"

namespace gpuslice::interposer {

// Allocation calls in progress, and a count of those that finished: the footprint reconciliation
// compares the driver's per-process figure with our books only when no allocation moved meanwhile.
extern std::atomic<std::uint64_t> g_allocs_in_flight;
extern std::atomic<std::uint64_t> g_allocs_done;

class AllocationInFlight {
 public:
  AllocationInFlight() { g_allocs_in_flight.fetch_add(1, std::memory_order_acq_rel); }
  ~AllocationInFlight() {
    g_allocs_done.fetch_add(1, std::memory_order_acq_rel);
    g_allocs_in_flight.fetch_sub(1, std::memory_order_acq_rel);
  }
  AllocationInFlight(const AllocationInFlight&) = delete;
  AllocationInFlight& operator=(const AllocationInFlight&) = delete;
};

inline bool memory_active() { return g_memory_active.load(std::memory_order_relaxed); }

struct Reservation {
  int ledger_dev = -1;  // -1: nothing reserved (device not limited)
  std::uint64_t bytes = 0;
  bool refused = false;
};

// Reserves `bytes` on device `d` (null or unlimited: nothing to reserve); before a refusal the
// reclaim (memory_books::set_reclaim) is tried once; a refusal is counted and reported (profiler,
// the processes holding the most).
Reservation reserve(DeviceState* d, std::uint64_t bytes);
// Counts and reports a refusal of `bytes` decided elsewhere (the driver's own reservations).
void refuse(DeviceState& d, std::uint64_t bytes);
// After the driver answered: a success is tracked under `key`, a failure gives the bytes back.
void settle(const Reservation& r, CUresult result, AllocKind kind, std::uint64_t key);

// Quota that applies to a limited device now (kUnlimited when none).
std::uint64_t effective_quota(const DeviceState& d);

// Allocates through `alloc` (which stores the new handle in `*key`) under the device's quota. When
// the driver has no room and borrowers hold memory this container is entitled to, the allocation
// waits for them to give it back (reclaim_ask.h), trying again until the reclaim deadline.
template <class Alloc>
CUresult allocate(DeviceState* d, std::uint64_t bytes, AllocKind kind, Alloc&& alloc) {
  AllocationInFlight flight;
  Reservation r = reserve(d, bytes);
  if (r.refused) return CUDA_ERROR_OUT_OF_MEMORY;
  std::uint64_t key = 0;
  CUresult res = alloc(&key);
  if (res == CUDA_ERROR_OUT_OF_MEMORY && r.ledger_dev >= 0 && reclaim::asking_possible(d)) [[unlikely]] {
    reclaim::Ask ask(d, bytes);
    while (ask.pause()) {
      res = alloc(&key);
      if (res != CUDA_ERROR_OUT_OF_MEMORY) break;
    }
    ask.finish(res);
  }
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

// Memory another process allocated and exported (CUDA IPC) is charged to that process only. If
// the driver counts it in this process's per-process figure as well, the footprint reconciliation
// must not charge it here: `open` (which opens the handle and stores the pointer in *ptr) is
// bracketed by two looks at the driver's figure, and what it grew by is left out of the
// reconciliation until close_imported(). Not a hot path: only processes with a ledger look.
struct ImportLook {
  DeviceState* device = nullptr;  // null: nothing to look at
  std::uint64_t before = 0;
  std::uint64_t done_before = 0;
  bool ok = false;
};
ImportLook look_before_import();
void settle_import(const ImportLook& look, CUresult result, std::uint64_t ptr);
void close_imported(std::uint64_t ptr);
// What the driver counts of opened imports in this process, per ledger record.
std::uint64_t imported_counted(int ledger_dev);

template <class Open>
CUresult open_imported(CUdeviceptr* ptr, Open&& open) {
  if (ledger() == nullptr || ptr == nullptr) return open();
  AllocationInFlight flight;  // the reconciliation waits while the figure moves
  ImportLook look = look_before_import();
  CUresult r = open();
  settle_import(look, r, r == CUDA_SUCCESS ? *ptr : 0);
  return r;
}

// The driver's figure for this process on the device (NVML); false when NVML does not list it.
bool own_driver_figure(const DeviceState& d, std::uint64_t* bytes);

// What the driver takes for a linear allocation of `bytes`: whole 2 MiB pages (cudaMalloc of 1 byte
// takes 2 MiB on driver 580), so the books hold what the driver's figure will show.
inline std::uint64_t device_granular(std::uint64_t bytes) {
  constexpr std::uint64_t kPage = 2ULL << 20;
  return bytes > ~0ULL - (kPage - 1) ? bytes : (bytes + kPage - 1) & ~(kPage - 1);
}

// Bytes a CUDA array of these extents takes (each extent at least 1; formats by element size).
std::uint64_t array_bytes(std::uint64_t w, std::uint64_t h, std::uint64_t depth, CUarray_format f,
                          unsigned channels);

// Charges (or gives back) the context footprint the driver reports for this process beyond the
// tracked allocations, when no allocation moved while NVML was asked. Without a memory quota no
// allocation is tracked, so this books everything the driver reports for the process.
enum class FootprintResult {
  Booked,     // the driver's figure for this process is in the books
  Skipped,    // an allocation moved meanwhile: next round
  NotListed,  // NVML cannot be asked, or does not list this process: the driver's figure is unknown
};
FootprintResult reconcile_context_footprint(DeviceState& d);

// Learns the pid NVML reports for this process (the host pid when it runs in a PID namespace):
// NVML's process list of the device just before this process's first context on it and just
// after; the pid that appeared is ours. Only armed for the first context while it is unknown.
// Callers use it for devices with a ledger record (the footprint is booked there alone).
class ContextProbe {
 public:
  void before_creation(DeviceState& d);
  void after_creation(DeviceState& d);

 private:
  static constexpr unsigned kCapacity = 256;
  unsigned pids_[kCapacity];
  unsigned count_ = 0;
  bool armed_ = false;
};

// Changes of the driver's figure smaller than this (below allocation granularity) are not worth
// a change of the books.
inline constexpr std::uint64_t kFootprintSlackBytes = 2ULL << 20;

namespace memory_books {
// What can give memory held by this process back to the device (true when it did), tried once by
// a reservation before it is refused. Set at start-up by lifecycle (driver_reservations.h's
// trim_graph_pool), from above: the books call nothing of what is built on them.
using Reclaim = bool (*)(DeviceState& d);
void set_reclaim(Reclaim reclaim);
// Watcher thread, every 100 ms: reaps dead processes and reconciles context footprints.
void tick(unsigned tick_number);
// In a forked child: it owns none of its parent's allocations, contexts or NVML pid.
void after_fork();
}  // namespace memory_books

}  // namespace gpuslice::interposer
