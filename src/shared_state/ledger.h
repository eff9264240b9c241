// Container-wide accounting: one memory-mapped state file per container (see layout.h for the
// on-disk format). All processes that open the same file share each device's quota. Reservations
// are lock-free (per-process counters plus a sum check, see ledger.cpp); a process that dies at any
// instruction is detected through its released OFD lock and its bytes return to the ledger.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/priority.h"
#include "common/result.h"
#include "shared_state/compute_shared.h"

namespace gpuslice::shm {

inline constexpr std::uint64_t kUnlimited = ~0ULL;
inline constexpr unsigned kNoComputeLimit = 0;  // compute limit 0 = not limited

// The one rule for limits: what applies is the request capped by the read-only limits file.
// A cap never raises a request, and removing a cap restores the request.
constexpr std::uint64_t effective_quota(std::uint64_t requested, std::uint64_t cap) {
  return requested < cap ? requested : cap;
}
// The memory guarantee that applies: the request capped by the file's cap (either alone when the
// other is 0 = none), and never above the quota in force (a guarantee promises no more than may
// be allocated). 0 = no guarantee.
constexpr std::uint64_t effective_guarantee(std::uint64_t requested, std::uint64_t cap, std::uint64_t quota) {
  std::uint64_t g = requested == 0 ? cap : (cap == 0 || requested < cap ? requested : cap);
  return g < quota ? g : quota;
}
constexpr unsigned effective_compute(unsigned requested, unsigned cap) {
  if (requested == kNoComputeLimit) return cap;
  if (cap == kNoComputeLimit) return requested;
  return requested < cap ? requested : cap;
}

// A device's limits from one source (a request or a cap); ~0 / kNoComputeLimit = none.
struct DeviceLimits {
  std::uint64_t quota = kUnlimited;
  unsigned compute = kNoComputeLimit;
  std::uint64_t guarantee = 0;  // memory guarantee, bytes; 0 = none
};

struct ProcessRow {
  std::int32_t pid = 0;                          // pid in the namespace of the process that registered
  std::int32_t host_pid = 0;                     // pid as NVML reports it, 0 if unknown
  std::string command;                           // comm / argv[0], truncated
  std::vector<std::uint64_t> used_by_device;     // indexed like Snapshot::devices
  std::vector<std::uint64_t> busy_ns_by_device;  // device time consumed (compute limiter)
  int slot = -1;                                 // the process's slot in the state file
};

struct DeviceRow {
  std::string uuid;
  int index = -1;                            // CUDA index in the process that created the record
  std::uint64_t total_bytes = 0;             // physical memory of the card
  std::uint64_t quota = kUnlimited;          // effective: min(requested, cap)
  unsigned compute_limit = kNoComputeLimit;  // effective
  std::uint64_t guarantee = 0;               // effective memory guarantee (effective_guarantee), 0 = none
  DeviceLimits requested;                    // environment / `gpuslice set`
  DeviceLimits cap;                          // read-only limits file
  std::uint64_t used = 0;                    // sum over live processes
  std::uint64_t refused_allocations = 0;
  // Reclaim (docs/quota.md, "Guarantees and borrowing"): the container's borrowed allocations still
  // on the device (movable, above its guarantee) and those moved to host memory, bytes; its reclaim
  // episodes, their total time and the bytes they moved.
  std::uint64_t borrowed_bytes = 0;
  std::uint64_t on_host_bytes = 0;
  std::uint64_t reclaim_episodes = 0;
  std::uint64_t reclaim_ns = 0;
  std::uint64_t reclaim_bytes = 0;
  int record = -1;  // the device record index (what try_reserve/set_quota take as `dev`)
};

struct Snapshot {
  std::string path;
  std::string error;  // non-empty: the file could not be read (truncated, replaced); nothing else is set
  std::optional<Priority> priority;  // priority sharing: the level asked for, unset when never set
  std::uint64_t held_back_ns = 0;    // time the container's launches were held back by higher priorities
  bool node_channel_refused =
      false;  // a process's node channel was refused (Ledger::note_node_channel_refused)
  std::optional<Priority> assigned_priority;  // the operator's level for the container, when known
  bool assignment_refused = false;            // its assignment file is malformed or unreadable
  std::vector<DeviceRow> devices;
  std::vector<ProcessRow> processes;
};

class Ledger {
 public:
  enum class Mode {
    Process,   // a process that allocates: claims a slot (OFD-locked) on register_process()
    Observer,  // CLI / daemon: reads, reaps and sets limits; never claims a slot
  };

  // Opens or creates the state file (and its directory). Validates magic, version, size and the
  // header checksum; a truncated, foreign, corrupted or other-version file is an error naming the
  // file and what is wrong. Observer mode never creates a file.
  // The file is opened without following a symlink and must be a regular file (a FIFO or device node
  // is refused without blocking). A process refuses a directory another user controls and a file
  // another user owns; it creates missing directories 0700 and the file 0600 (0660 in a setgid,
  // group-writable directory). An observer never maps the file for reading (see observed_ledger.h).
  static Result<std::unique_ptr<Ledger>> open(const std::string& path, Mode mode);

  virtual ~Ledger() = default;

  // Finds or creates the device record for `uuid`; on creation the requested quota and compute
  // limit are initialised from the arguments (no caps yet: the caller applies set_caps next).
  // Returns the device slot (0..kMaxDeviceRecords-1) or an error.
  virtual Result<int> attach_device(std::string_view uuid, int cuda_index, std::uint64_t total_bytes,
                                    std::uint64_t quota, unsigned compute_limit) = 0;

  // Claims this process's slot. Safe to call again after fork() (the child gets a new slot).
  virtual Result<bool> register_process() = 0;

  // Atomically charges `bytes` to this process on device `dev` unless the container's total would
  // exceed the device quota; on refusal reaps dead processes once and retries. Never blocks.
  virtual bool try_reserve(int dev, std::uint64_t bytes) = 0;
  virtual void release(int dev, std::uint64_t bytes) = 0;
  // Charges to this process bytes the driver already holds for it (what no reservation saw), even
  // past the quota: the container's total then shows it, and reservations are refused until it is
  // below the quota again. release() gives them back.
  virtual void charge_held(int dev, std::uint64_t bytes) = 0;

  // The limits that apply (effective_quota / effective_compute of request and cap).
  virtual std::uint64_t quota(int dev) const = 0;
  virtual unsigned compute_limit(int dev) const = 0;
  virtual std::uint64_t used(int dev) const = 0;          // container total on the device
  virtual std::uint64_t used_by_self(int dev) const = 0;  // this process only

  // Change the request; the effective limit follows, still capped.
  virtual void set_quota(int dev, std::uint64_t bytes) = 0;
  virtual void set_compute_limit(int dev, unsigned percent) = 0;
  // Change the memory guarantee asked for (0 = none).
  virtual void set_guarantee(int dev, std::uint64_t bytes) = 0;
  // The memory guarantee that applies (effective_guarantee of request, cap and quota), 0 = none.
  virtual std::uint64_t guarantee(int dev) const = 0;
  // Replaces the caps of the read-only limits file (guarantee cap included); the effective limits follow.
  virtual void set_caps(int dev, DeviceLimits caps) = 0;
  virtual DeviceLimits requested(int dev) const = 0;
  virtual DeviceLimits caps(int dev) const = 0;
  virtual void count_refusal(int dev) = 0;

  // Compute accounting for the limiter: device busy time this process consumed.
  virtual void add_busy_ns(int dev, std::uint64_t ns) = 0;
  // The shared compute budget of device `dev` (never null for an attached device).
  virtual ComputeShared* compute_state(int dev) = 0;

  // Returns the bytes of processes whose lock is gone to the ledger; returns how many were reaped.
  virtual int reap_dead() = 0;

  virtual Snapshot snapshot() const = 0;
  virtual const std::string& path() const = 0;

  // try_reserve() does not count its refusals: the caller decides which refusals the user sees
  // (count_refusal) so a retried reservation is not counted twice.
  // used() never exceeds what the container held at one instant during the call (so never the
  // quota, however busy the ledger); it is exact whenever no reservation is in flight.

  // Records this process's pid as the host sees it (e.g. from NVML), replacing what
  // register_process() derived from /proc (0 when it could not tell). No effect before registering.
  virtual void set_host_pid(int host_pid) = 0;
  // The record index of `uuid` (case-insensitive), or -1.
  virtual int find_device(std::string_view uuid) const = 0;
  virtual int device_count() const = 0;
  // The live compute limit of `dev` in the mapped file (percent, 0 = none), for code that polls it
  // without a virtual call; null for an unknown device. Valid as long as the Ledger lives.
  virtual const std::atomic<std::uint32_t>* compute_limit_source(int dev) const = 0;
  // Returns this process's bytes and gives its slot back (the destructor does it too).
  virtual void unregister_process() = 0;
  // This process's slot index, or -1 when not registered (or forked and not yet re-registered).
  virtual int slot_index() const = 0;
  // False for an observer that could only open the file read-only: it can show, not change.
  virtual bool writable() const = 0;

  // Priority sharing (docs/priority.md): the level the container asks for (unset when never set),
  // which `gpuslice set --priority` changes live, and the time its launches were held back, which
  // the library adds to.
  virtual void set_priority(Priority level) = 0;
  // Sets the level only if none is set yet (the environment's initial value: a live change made
  // with `gpuslice set` is not undone by a process that starts later).
  virtual void init_priority(Priority level) = 0;
  virtual std::optional<Priority> priority() const = 0;
  // The stored level (a Priority's value, kNoPriority when none) in the mapped file, for the launch
  // gate to read live like compute_limit_source; null where nothing is mapped.
  virtual const std::atomic<std::uint32_t>* priority_source() const = 0;
  virtual void add_held_back_ns(std::uint64_t ns) = 0;
  // A process of the container could not use the node channel (it was refused as untrustworthy):
  // said in the state file, so the daemon and `gpuslice status` show it.
  virtual void note_node_channel_refused() = 0;
  // What the operator assigned the container (nullopt: nothing), and whether its file was refused.
  virtual void note_assignment(std::optional<Priority> assigned, bool refused) = 0;

  // The context footprint measured on a device: the largest any process of the container found
  // (0 until one did). A process reserves it before its first context there.
  virtual std::uint64_t context_footprint(int dev) const = 0;
  virtual void note_context_footprint(int dev, std::uint64_t bytes) = 0;

  // Reclaim: this process's borrowed bytes still on device `dev` and moved to host memory (its slot
  // keeps them; the snapshot sums the live processes'), and one finished reclaim episode of the
  // container. No effect where the file cannot be written (observers).
  virtual void set_reclaim_figures(int /*dev*/, std::uint64_t /*borrowed*/, std::uint64_t /*on_host*/) {}
  virtual void add_reclaim_episode(int /*dev*/, std::uint64_t /*ns*/, std::uint64_t /*bytes*/) {}
};

// Validates the first `available` bytes of a state file whose size is `file_size`; the error
// names `path` and what is wrong. Used by Ledger::open; exposed for tests and fuzzing.
Result<bool> validate_header_bytes(const void* data, std::size_t available, std::uint64_t file_size,
                                   const std::string& path);

}  // namespace gpuslice::shm
