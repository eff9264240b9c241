// On-disk format of the container-wide state file (see docs/shared-state.md).
//
// The file is memory-mapped MAP_SHARED by every process of a container, so this header IS the
// format: change anything below (sizes, order, meaning) and bump kLayoutVersion. Files of another
// version are refused with a clear error, never reinterpreted.
//
//   [Header, 4096 bytes][DeviceRecord x kMaxDeviceRecords][Slot x kMaxSlots]
//
// The header's first fields are immutable after creation and covered by an FNV-1a checksum; the
// mutable fields after `checksum` are atomics. Every field another process may change concurrently
// is a lock-free std::atomic, so readers never see torn values.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shared_state/compute_shared.h"

namespace gpuslice::shm::layout {

inline constexpr char kMagic[8] = {'G', 'P', 'U', 'S', 'L', 'I', 'C', 'E'};
inline constexpr std::uint32_t kLayoutVersion = 2;

// Device records per state file (the GPUs one container uses; CUDA ordinals go up to
// config::kMaxCudaDevices, but a container is given few).
inline constexpr std::uint32_t kMaxDeviceRecords = 16;
inline constexpr std::uint32_t kMaxSlots = 1024;
inline constexpr std::size_t kUuidBytes = 96;    // NVML's UUID buffer size, NUL-terminated
inline constexpr std::size_t kCommandWords = 8;  // 64 bytes of command line, NUL-padded
inline constexpr std::size_t kHeaderBytes = 4096;

// Slot states (low 2 bits of Slot::state). The other bits hold a claim time and a generation so
// that a CAS made on an old observation of a slot fails once the slot was freed and claimed again.
enum SlotState : std::uint64_t {
  kSlotFree = 0,
  kSlotClaiming = 1,  // CAS'd by a claimer that has not yet taken its OFD lock
  kSlotActive = 2,    // owner holds the OFD lock on the slot's lock byte
  kSlotReaping = 3,   // owner gone; a reaper is returning its bytes
};

// Slot::state word: [generation:32][claim second:30][state:2].
inline constexpr std::uint64_t slot_word(std::uint64_t generation, std::uint64_t claim_second,
                                         SlotState state) {
  return (generation << 32) | ((claim_second & 0x3FFFFFFFULL) << 2) | static_cast<std::uint64_t>(state);
}
inline constexpr SlotState slot_state(std::uint64_t word) { return static_cast<SlotState>(word & 3); }
inline constexpr std::uint64_t slot_claim_second(std::uint64_t word) { return (word >> 2) & 0x3FFFFFFFULL; }
inline constexpr std::uint64_t slot_generation(std::uint64_t word) { return word >> 32; }

enum DeviceState : std::uint32_t {
  kDeviceFree = 0,
  kDeviceInitialising = 1,  // being filled in under the file's flock
  kDeviceReady = 2,
};

struct Header {
  // Immutable after creation; covered by `checksum`.
  char magic[8];
  std::uint32_t version;
  std::uint32_t header_size;
  std::uint64_t file_size;
  std::uint32_t max_devices;
  std::uint32_t max_slots;
  std::uint32_t device_record_size;
  std::uint32_t slot_size;
  std::uint64_t devices_offset;
  std::uint64_t slots_offset;
  std::uint64_t created_realtime_ns;
  std::uint64_t checksum;  // FNV-1a 64 over every byte before this field

  // Mutable. Fields added after the first release of this version live in what was zero-filled
  // reserved space, with 0 meaning "not set": files created before them read as unset, and older
  // readers ignore them, so no version change was needed.
  alignas(64) std::atomic<std::uint32_t> slot_high_water;  // 1 + highest slot index ever claimed
  std::atomic<std::uint32_t> priority;                     // priority sharing: a Priority value, 0 = not set
  std::atomic<std::uint64_t> held_back_ns;  // time the container's launches were held back by priority
  // Per device record: the largest context footprint a process measured there (0 = none yet); a
  // process reserves it before its first context on the device.
  std::atomic<std::uint64_t> context_footprint[kMaxDeviceRecords];
  // Non-zero once a process of the container had its node channel refused (an untrustworthy node
  // directory or writer directory): it then takes no turns and no priorities with other containers.
  std::atomic<std::uint32_t> node_channel_refused;
  // The level the operator assigned the container's writer (a Priority's value; 0: no assignment
  // known), and non-zero while that assignment is refused as malformed or unreadable (the container
  // then runs at low): written by the processes' watchers, shown by `gpuslice status`.
  std::atomic<std::uint32_t> assigned_priority;
  std::atomic<std::uint32_t> assignment_refused;
  // Per device record: the memory guarantee the container asked for (environment) and the read-only
  // limits file's cap on it, bytes, 0 = none (docs/quota.md, "Guarantees and borrowing"). Kept
  // beside the record's limits; the effective guarantee is shm::effective_guarantee of both and the
  // effective quota.
  alignas(8) std::atomic<std::uint64_t> requested_guarantee[kMaxDeviceRecords];
  std::atomic<std::uint64_t> guarantee_cap[kMaxDeviceRecords];
  // Per device record: the container's reclaim episodes (memory it borrowed moved to host memory so
  // that a container within its guarantee could allocate), their total time and the bytes moved;
  // only ever grow. Written by the borrowing processes (interposer/reclaim).
  std::atomic<std::uint64_t> reclaim_episodes[kMaxDeviceRecords];
  std::atomic<std::uint64_t> reclaim_ns[kMaxDeviceRecords];
  std::atomic<std::uint64_t> reclaim_bytes[kMaxDeviceRecords];
};
static_assert(sizeof(Header) <= kHeaderBytes);
static_assert(offsetof(Header, priority) == 132 && offsetof(Header, held_back_ns) == 136 &&
                  offsetof(Header, context_footprint) == 144 &&
                  offsetof(Header, node_channel_refused) == 272 &&
                  offsetof(Header, assigned_priority) == 276 && offsetof(Header, assignment_refused) == 280 &&
                  offsetof(Header, requested_guarantee) == 288 && offsetof(Header, guarantee_cap) == 416 &&
                  offsetof(Header, reclaim_episodes) == 544 && offsetof(Header, reclaim_ns) == 672 &&
                  offsetof(Header, reclaim_bytes) == 800,
              "header field offsets are part of the format");

struct alignas(64) DeviceRecord {
  std::atomic<std::uint32_t> state;  // DeviceState
  std::int32_t cuda_index;           // written before state becomes Ready, never after
  std::uint64_t total_bytes;         // idem
  char uuid[kUuidBytes];             // idem

  // The limits that apply, read on every reservation / limiter decision: always
  // effective_quota(requested_quota, quota_cap) and effective_compute(...) of the fields below,
  // recomputed by whoever changes a request or a cap (Ledger::set_quota, set_caps, ...).
  alignas(64) std::atomic<std::uint64_t> quota;  // bytes, ~0 = unlimited
  std::atomic<std::uint32_t> compute_limit;      // percent, 0 = unlimited
  std::atomic<std::uint64_t> refused_allocations;
  // What the container asked for (environment, `gpuslice set`) and the read-only file's caps,
  // kept apart so that neither can overwrite the other.
  std::atomic<std::uint64_t> requested_quota;    // bytes, ~0 = unlimited
  std::atomic<std::uint64_t> quota_cap;          // bytes, ~0 = no cap
  std::atomic<std::uint32_t> requested_compute;  // percent, 0 = unlimited
  std::atomic<std::uint32_t> compute_cap;        // percent, 0 = no cap

  ComputeShared compute;
};

// Per process, per device. `charged` is what admission sums: it includes reservations in flight,
// so a check never misses a concurrent one. `granted`/`returned` only ever grow (modulo 2^64) and
// their difference is the committed usage: reading every `granted` before every `returned` gives a
// value the true total had at one instant, however the counters move meanwhile.
struct SlotDeviceCounters {
  std::atomic<std::uint64_t> charged;
  std::atomic<std::uint64_t> granted;
  std::atomic<std::uint64_t> returned;
  std::atomic<std::uint64_t> busy_ns;  // device time this process consumed (compute limiter)
};

struct alignas(64) Slot {
  std::atomic<std::uint64_t> state;  // slot_word()
  std::atomic<std::int32_t> pid;
  std::atomic<std::int32_t> host_pid;
  std::atomic<std::uint64_t> registered_realtime_ns;
  std::atomic<std::uint64_t> command[kCommandWords];
  // Reclaim (interposer/reclaim), in what was the padding before `devices` (zero in files created
  // before them): this process's borrowed allocations still on the device and those moved to host
  // memory, bytes, on the device record `reclaim_record` - 1 (0: none). Zeroed when the slot is
  // claimed and when it is reaped.
  std::atomic<std::uint64_t> borrowed_bytes;
  std::atomic<std::uint64_t> on_host_bytes;
  std::atomic<std::uint64_t> reclaim_record;
  alignas(64) SlotDeviceCounters devices[kMaxDeviceRecords];
};
static_assert(offsetof(Slot, borrowed_bytes) == 88 && offsetof(Slot, on_host_bytes) == 96 &&
                  offsetof(Slot, reclaim_record) == 104 && offsetof(Slot, devices) == 128,
              "slot field offsets are part of the format");

inline constexpr std::uint64_t kDevicesOffset = kHeaderBytes;
inline constexpr std::uint64_t kSlotsOffset = kDevicesOffset + sizeof(DeviceRecord) * kMaxDeviceRecords;
inline constexpr std::uint64_t kFileSize = kSlotsOffset + sizeof(Slot) * kMaxSlots;

// Each slot's owner holds an OFD write lock on this one byte (inside the slot) while it lives.
inline constexpr std::uint64_t slot_lock_offset(std::uint32_t slot) {
  return kSlotsOffset + sizeof(Slot) * slot;
}

static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::int32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<std::uint64_t>) == 8 && sizeof(std::atomic<std::uint32_t>) == 4);
// Sizes are part of the format: a compiler change that moves them must be caught here.
static_assert(sizeof(DeviceRecord) == 256);
static_assert(sizeof(Slot) == 640);
static_assert(kFileSize == 4096 + 16 * 256 + 1024 * 640);

inline std::uint64_t fnv1a64(const void* data, std::size_t size) {
  auto* bytes = static_cast<const unsigned char*>(data);
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (std::size_t i = 0; i < size; ++i) {
    hash ^= bytes[i];
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

// How far a record's heartbeat (CLOCK_MONOTONIC) is from a reader's now, either way: records are
// read after the reader took its time, so one stamped meanwhile is ahead of it and fresh, while
// one far ahead is as bogus as one far behind is stale. (Spelled `now - heartbeat` in unsigned
// arithmetic, the one stamped meanwhile wrapped around and read as stale.)
inline std::uint64_t heartbeat_distance_ns(std::uint64_t heartbeat_ns, std::uint64_t now_ns) {
  return heartbeat_ns > now_ns ? heartbeat_ns - now_ns : now_ns - heartbeat_ns;
}

inline std::uint64_t header_checksum(const Header& header) {
  return fnv1a64(&header, offsetof(Header, checksum));
}

}  // namespace gpuslice::shm::layout
