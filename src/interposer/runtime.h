// Process-wide state of the interposer: configuration, the container ledger and the device table.
// State only: lifecycle.h brings it up (lazily, on the first hooked call, never from a
// constructor), devices.h attaches devices, memory_books.h and launch_gate.h enforce. It stays
// alive until the process ends (hooks still run during exit).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <ctime>

#include "abi/nvml_abi.h"
#include "config/settings.h"
#include "limiter/clock_correction.h"
#include "shared_state/ledger.h"

namespace gpuslice::limiter {
class ComputeLimiter;
class PriorityGate;
class PeerBoard;
}  // namespace gpuslice::limiter

namespace gpuslice::interposer {

class NodePresence;
class PresenceBoard;

inline constexpr int kMaxDevices = config::kMaxCudaDevices;

struct DeviceState {
  int index = -1;  // CUDA ordinal
  // Record in the container ledger; -1 = not limited. Set when the device attaches, or by the
  // watcher when a limits file written later first caps it; hot paths read it without a lock.
  std::atomic<int> ledger_dev{-1};
  char uuid[64] = {};
  std::uint64_t physical_total = 0;
  std::atomic<std::uint64_t> context_charge{0};  // footprint charged beyond tracked allocations
  std::atomic<bool> has_context{false};          // the first context's footprint was charged
  // The driver's own reservations charged for this process (driver_reservations.h), by kind.
  std::atomic<std::uint64_t> limit_charge[5] = {};    // per CUlimit, beyond the defaults
  std::atomic<std::uint64_t> stack_per_thread{1024};  // the stack limit as set or grown
  std::atomic<std::uint64_t> resident_threads{0};     // SMs x threads per SM; 0: not asked yet
  std::atomic<std::uint64_t> graph_charge{0};         // the graph pool's reserved memory
  std::atomic<std::uint64_t> module_charge{0};        // module and library images
  std::atomic<std::uint64_t> module_prepaid{0};       // globals charged at load the driver takes later
  std::atomic<int> sm{-1};                            // major * 10 + minor; -1 not asked, 0 unknown
  std::atomic<std::uint64_t> context_measured{0};     // the footprint first booked after creation
  std::atomic<std::uint64_t> context_each{0};         // the most a further context was seen to take
  std::atomic<std::uint64_t> launch_growth{0};  // what a context took at its first launch, beyond creation
  std::atomic<std::uint64_t> context_mark{0};   // the context charge when a context was last created
  std::atomic<std::uint64_t> footprint_headroom{0};        // footprint growth seen in one interval, decaying
  std::atomic<bool> over_quota_said{false};                // the over-quota line was logged
  std::atomic<limiter::ComputeLimiter*> limiter{nullptr};  // created when a compute limit applies
  std::atomic<std::uint64_t> busy_published{0};            // limiter busy time already in the ledger
  std::atomic<std::uint64_t> turn_offset{~0ULL};           // node-wide turn of this container (~0: none)
  // The compute limiter's clock correction (limiter/clock_correction.h): the device's NVML handle
  // (resolved by the watcher), the flat-out SM clock it samples every 100 ms, and what the limiter
  // reads them through.
  std::atomic<nvmlDevice_t> nvml{nullptr};
  limiter::ClockReference flat_clock;
  limiter::SmClockSource clock_source;
  int nvml_tries = 0;  // watcher thread only: handle lookups that failed
  // Watcher thread only: the limiter that set_clock_source() was given.
  limiter::ComputeLimiter* clock_given_to = nullptr;
  // GPUSLICE_MPS_COMPUTE=threads: the GPU-time limit the limiter reads instead of the container's
  // (config::partition_time_limit of the live limit and the SM share; 0 while the SMs hold it).
  std::atomic<std::uint32_t> partition_limit{0};
  // Priority sharing (priority_sharing.h): the device's gate once the container has a level.
  std::atomic<limiter::PriorityGate*> priority_gate{nullptr};
  PresenceBoard* priority_board = nullptr;  // watcher thread only
  std::uint64_t held_back_published = 0;    // watcher thread only: gate time already in the ledger
  NodePresence* presence = nullptr;         // node_presence.h; watcher thread only
  bool presence_failed = false;             // watcher thread only: the last try was refused
  std::uint64_t presence_retry_ns = 0;      // watcher thread only: when to try again
  std::uint64_t presence_backoff_ns = 0;    // watcher thread only: the wait after the next refusal
};

// Where a device of the table stands; only Ready devices are read without synchronisation.
enum class DevicePhase : int {
  Unknown,    // never asked for
  Attaching,  // one thread is describing it and attaching its ledger record
  Ready,      // described; ledger_dev says whether it is limited
  Unusable,   // the driver cannot describe it, or the ledger refused it: no limit can hold
};

// A ledger record this process attached, with the device it stands for: the caps of the limits
// file are handed to each whenever the file changes.
struct AttachedRecord {
  int ledger_dev = -1;
  int index = -1;
  char uuid[64] = {};
};

struct Runtime {
  config::Settings settings;  // memory_cap / compute_cap only under limits_lock after initialisation
  // Null until a limit applies: at start, or when the limits file first gives a cap (watcher).
  std::atomic<shm::Ledger*> ledger{nullptr};
  DeviceState devices[kMaxDevices];
  std::atomic<DevicePhase> phases[kMaxDevices] = {};
  std::uint64_t container_key = 0;        // identity of this container's state file (node-wide turns)
  std::atomic<bool> has_priority{false};  // the container has a level: priority sharing runs
  // The ledger came after the process started (a cap written later): what it already holds on a
  // device, from before the device had a record, is found by the footprint reconciliation.
  std::atomic<bool> capped_late{false};

  // Attaching a device and applying a new limits file exclude each other, so no device misses a
  // cap. Rare on both sides; a spin lock so that a forked child can simply reset it.
  std::atomic<bool> limits_lock{false};
  AttachedRecord attached[kMaxDevices];  // under limits_lock
  int attached_count = 0;                // under limits_lock
  // The limits file as last read (watcher thread only): a rewrite of the same size within one tick
  // of a coarse filesystem clock still has another inode (rename) or ctime.
  timespec limits_mtime{};
  timespec limits_ctime{};
  ino_t limits_inode = 0;
  off_t limits_size = -1;
};

// Any device has a memory quota: the memory hooks' single predictable branch (the launch hooks'
// is launch_flag.h's).
extern std::atomic<bool> g_memory_active;

// The runtime once initialised (lifecycle.h), else null.
Runtime* runtime();
void install_runtime(Runtime* rt);  // lifecycle, and tests that build a runtime of their own

const config::Settings& settings();
shm::Ledger* ledger();  // null while no limit applies

// Calls fn(DeviceState&) for every Ready device of the table.
template <class Fn>
void for_each_ready_device(Fn&& fn) {
  Runtime* rt = runtime();
  if (rt == nullptr) return;
  for (int i = 0; i < kMaxDevices; ++i) {
    if (rt->phases[i].load(std::memory_order_acquire) == DevicePhase::Ready) fn(rt->devices[i]);
  }
}

}  // namespace gpuslice::interposer
