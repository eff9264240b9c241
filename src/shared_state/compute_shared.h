// Per-device compute-limiter state that lives inside the shared state file, so every process of a
// container draws on one budget. Plain lock-free atomics on a mapped page; times are CLOCK_MONOTONIC
// nanoseconds, which every process on the host reads alike.
#pragma once

#include <atomic>
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
};
static_assert(sizeof(ComputeShared) == 64, "the state file's layout counts on one cache line per device");
static_assert(std::atomic<std::int64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

}  // namespace gpuslice::shm
