// Process-wide state of the interposer: configuration, the container ledger, per-device state and
// the watcher thread. Initialised lazily on the first hooked call (never from a constructor), kept
// alive until the process ends (hooks still run during exit), rebuilt in a forked child.
#pragma once

#include <atomic>
#include <cstdint>

#include "abi/cuda_abi.h"
#include "config/settings.h"
#include "shared_state/ledger.h"
#include "shared_state/node_turns.h"

namespace gpuslice::limiter {
class ComputeLimiter;
}

namespace gpuslice::interposer {

inline constexpr int kMaxDevices = 64;

struct DeviceState {
  int index = -1;       // CUDA ordinal
  int ledger_dev = -1;  // record in the container ledger; -1 = this device is not limited
  char uuid[64] = {};
  std::uint64_t physical_total = 0;
  std::atomic<std::uint64_t> file_cap{shm::kUnlimited};  // read-only limits file, re-read live
  std::atomic<std::uint64_t> context_charge{0};          // footprint charged beyond tracked allocations
  std::atomic<bool> has_context{false};
  std::atomic<limiter::ComputeLimiter*> limiter{nullptr};  // created when a compute limit applies
  std::atomic<std::uint64_t> busy_published{0};            // limiter busy time already in the ledger
  std::atomic<std::uint64_t> turn_offset{~0ULL};           // node-wide turn of this container (~0: none)
  shm::NodeTurns* turns = nullptr;                         // watcher thread only
  bool turns_failed = false;                               // watcher thread only
};

// Any device has a memory quota / compute limit: the hooks' single predictable branch.
extern std::atomic<bool> g_memory_active;
extern std::atomic<bool> g_compute_active;

// CUDA_SUCCESS once initialised; CUDA_ERROR_NOT_INITIALIZED when the configuration or the shared
// state is unusable (fail closed: the message was logged once, naming the variable or file).
CUresult ensure_initialized();

const config::Settings& settings();
shm::Ledger* ledger();  // null when no limit is configured

// State of a CUDA device (ordinal), attached to the ledger on first use; null if out of range or
// the driver cannot describe it. A device with ledger_dev < 0 is not limited.
DeviceState* device_state(CUdevice dev);
// The state of a device that was already attached, without attaching it; null otherwise.
DeviceState* device_state_if_attached(CUdevice dev);
// The device of the calling thread's current context, or null when there is none.
DeviceState* current_device_state(CUdevice* out_dev = nullptr);
// Finds or attaches the ledger record of a device known by UUID only (NVML callers); -1 if not limited.
int ledger_device_for_uuid(const char* uuid, int cuda_index, std::uint64_t physical_total);

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

// Quota that applies now: the ledger's, capped by the read-only limits file.
std::uint64_t effective_quota(const DeviceState& d);

// Charges the context footprint the driver reports for this process (NVML) right away.
void reconcile_context_footprint(DeviceState& d);

// Learns the pid NVML reports for this process (the host pid when it runs in a PID namespace):
// NVML's process list of the device just before this process's first context on it and just
// after; the pid that appeared is ours. Only armed for the first context while it is unknown.
// Callers use it only for devices with a memory quota (the footprint is charged there alone).
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

}  // namespace gpuslice::interposer
