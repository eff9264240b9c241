// One policy of the priority gate (priority_gate.h): the floor, a minimum share of admission time
// for a lower priority whose higher peers never idle. Admission time accrues at `percent` of the
// time spent held and is spent at the rest of the time admitted; credit is capped at one window's
// share, and a slice is granted only when it is full: after `window_ns` of continuous holding, then
// every slice / percent. Lock-free: one thread accounts at a time, the others see the open slice.
#pragma once

#include <atomic>
#include <cstdint>

namespace gpuslice::limiter {

class PriorityFloor {
 public:
  // `percent` 0: strict priority (starvation allowed).
  PriorityFloor(unsigned percent, std::uint64_t window_ns, std::uint64_t slice_ns)
      : percent_(percent > 100 ? 100 : percent), window_ns_(window_ns), slice_ns_(slice_ns) {}

  // Whether the calling thread may launch although held (`held`: it is held since `held_since`);
  // called unheld after each admitted launch, to spend credit.
  bool admits(std::uint64_t now, std::uint64_t held_since, bool held);
  std::uint64_t slices() const { return slices_.load(std::memory_order_relaxed); }

 private:
  const unsigned percent_;
  const std::uint64_t window_ns_;
  const std::uint64_t slice_ns_;
  std::atomic<bool> busy_{false};
  std::atomic<std::uint64_t> updated_ns_{0};
  std::atomic<std::int64_t> credit_ns_{0};
  std::atomic<std::uint64_t> open_until_ns_{0};
  std::atomic<std::uint64_t> slices_{0};
};

}  // namespace gpuslice::limiter
