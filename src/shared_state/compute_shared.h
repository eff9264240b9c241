// Per-device compute-limiter state that lives inside the shared state file, so every process of a
// container draws on one budget. Plain lock-free atomics on a mapped page; times are CLOCK_MONOTONIC
// nanoseconds, which every process on the host reads alike.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace gpuslice::shm {

struct alignas(64) ComputeShared {
  std::atomic<std::int64_t> tokens_ns;        // device time the container may still use (may go negative)
  std::atomic<std::uint64_t> refilled_at_ns;  // when tokens were last topped up
  std::atomic<std::uint64_t>
      covered_until_ns;                      // end of the busy interval already charged (union of processes)
  std::atomic<std::uint64_t> busy_total_ns;  // device time charged since the record was created
  // Where the container's on/off cycles start (CLOCK_MONOTONIC modulo the cycle) + 1; 0 = not yet
  // chosen. Every process of the container opens its windows in the same part of the cycle.
  std::atomic<std::uint64_t> cycle_anchor_ns;
  // Added in reserved (zero-filled) space, 0 = none: the largest recent charge of a window measured
  // below its wall time (charged when it closes, in one piece). The bucket banks at least this much,
  // so that another process's refill, capping the bucket meanwhile, does not drop the credit that
  // this window's charge will need.
  std::atomic<std::uint64_t> measured_charge_ns;
};
static_assert(sizeof(ComputeShared) == 64, "the state file's layout counts on one cache line per device");
static_assert(offsetof(ComputeShared, measured_charge_ns) == 40, "field offsets are part of the format");
static_assert(std::atomic<std::int64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

}  // namespace gpuslice::shm
