// The simulated devices as every process sees them: one small memory-mapped file per state
// directory holding, per device, the memory in use and the busy timeline, and per process its
// usage, so that NVML in any process (nvidia-smi, the node daemon) reports what all others do.
//
// Cross-process rules: counters are lock-free atomics; the timeline of a device is guarded by a
// robust process-shared mutex (a process killed while holding it does not wedge the others);
// a slot whose process is gone is reclaimed by whoever notices first (kill(pid, 0) == ESRCH).
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>

#include "busy_ring.h"
#include "mock_config.h"

namespace gpuslice::mock {

inline constexpr unsigned kMaxProcesses = 128;
inline constexpr std::uint64_t kStateMagic = 0x6b636f6d6563696cULL;  // "licemock"
inline constexpr std::uint32_t kStateVersion = 1;

struct DeviceRecord {
  pthread_mutex_t lock;                   // guards `timeline` and every slot's `timeline[device]`
  std::atomic<std::uint64_t> used_bytes;  // all processes, contexts included
  BusyRing timeline;
};

struct ProcessSlot {
  // 0 free; > 0 owned by that pid; < 0 being set up or reclaimed by process -pid.
  std::atomic<std::int32_t> pid;
  std::atomic<std::uint64_t> used_bytes[kMaxDevices];  // contexts included
  std::atomic<std::uint64_t> context_bytes[kMaxDevices];
  std::atomic<std::uint32_t> has_context[kMaxDevices];  // listed by NVML even with 0 context bytes
  BusyRing timeline[kMaxDevices];
};

struct StateFile {
  std::atomic<std::uint64_t> magic;  // written last when the file is created
  std::uint32_t version;
  std::uint32_t size;
  // The simulated machine. Seeded from the environment of the process that finds no live
  // process in the file, so a stale file never outlives a change of GPUSLICE_MOCK_*.
  std::uint32_t device_count;
  std::uint32_t fake_clock;  // 1: time only moves when a wait or the test control moves it
  std::atomic<std::uint64_t> fake_now_ns;
  std::uint64_t total_bytes[kMaxDevices];
  char uuid[kMaxDevices][kUuidLength];
  DeviceRecord device[kMaxDevices];
  ProcessSlot slot[kMaxProcesses];
};

static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "shared counters must be lock-free");
static_assert(std::atomic<std::int32_t>::is_always_lock_free, "shared slots must be lock-free");
static_assert(sizeof(StateFile) < (1u << 31), "size field");

struct ProcessUsage {
  std::int32_t pid;
  std::uint64_t used_bytes;
  std::uint64_t context_bytes;
  unsigned slot;
};

// One process's (one library's) attachment to the state file.
class SharedState {
 public:
  enum class AttachError { None, Io, NoFreeSlot };

  // Maps the file of config.state_dir, creating or re-seeding it; with claim_slot the caller
  // becomes a process that can own memory (libcuda), without it only an observer (NVML).
  AttachError attach(const MockConfig& config, bool claim_slot);
  // Gives the slot back (uncharging everything it held) and unmaps.
  void detach();
  // Unmaps without giving the slot back: the child side of fork, whose slot is the parent's.
  void abandon();

  bool attached() const { return file_ != nullptr; }
  bool has_slot() const { return slot_ >= 0; }
  unsigned device_count() const { return file_->device_count; }
  std::uint64_t total_bytes(unsigned device) const { return file_->total_bytes[device]; }
  std::uint64_t used_bytes(unsigned device) const {
    return file_->device[device].used_bytes.load(std::memory_order_relaxed);
  }
  const char* uuid(unsigned device) const { return file_->uuid[device]; }

  // Reserves `bytes` of the device for this process; false when the device is full.
  bool charge(unsigned device, std::uint64_t bytes, bool is_context);
  void uncharge(unsigned device, std::uint64_t bytes, bool is_context);
  // Whether this process has a context on the device (NVML lists it as a compute process).
  void set_has_context(unsigned device, bool present);

  // Places `duration_ns` of work on the device timeline after everything queued so far, in any
  // process; returns when it will be finished.
  std::uint64_t enqueue(unsigned device, std::uint64_t duration_ns);

  std::uint64_t now_ns() const;
  // Blocks until now_ns() >= deadline (with the fake clock: moves the clock there instead).
  void wait_until(std::uint64_t deadline_ns) const;
  bool fake_clock() const { return file_->fake_clock != 0; }
  void advance_fake_clock(std::uint64_t ns) const;
  // NVML sample timestamps: microseconds since the epoch (fake clock: its own microseconds).
  std::uint64_t timestamp_us() const;

  // Busy nanoseconds in [from, to) of the device, or of the process in `slot` on it.
  std::uint64_t device_busy(unsigned device, std::uint64_t from, std::uint64_t to) const;
  std::uint64_t process_busy(unsigned slot, unsigned device, std::uint64_t from, std::uint64_t to) const;

  // Live processes with a context or memory on the device (one entry per slot). Returns how many
  // exist, writing at most `capacity`.
  unsigned processes_on(unsigned device, ProcessUsage* out, unsigned capacity) const;

  // Frees the slots of processes that no longer exist; returns how many it freed.
  unsigned reclaim_dead() const;

 private:
  bool open_and_lock(const MockConfig& config, int* fd_out);
  void seed(const MockConfig& config);
  bool claim_slot();
  void release_slot(unsigned index) const;

  StateFile* file_ = nullptr;
  int slot_ = -1;
  std::uint64_t pinned_limit_[kMaxDevices] = {};  // MPS client: this process's limit per device
};

}  // namespace gpuslice::mock
