// The measured wall time of one launch, shared by the compute limiter (which sizes its windows'
// launch caps with it) and the priority gate (which bounds the work it keeps in flight).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace gpuslice::limiter {

// Sums of wall time and launches of the samples (the work between two drains), both halved at every
// sample, so each sample counts by its launches: a few launches slowed by a CPU hiccup barely move
// an estimate made of thousands, while a new workload takes over within a few samples. The first
// sample is rough (a first window's two launches, or a deep queue launched before anyone looked), so
// the second replaces it. One thread at a time adds; any thread may read.
class LaunchCost {
 public:
  void add(std::uint64_t ns, std::uint64_t launches) {
    const bool replace = samples_.fetch_add(1, std::memory_order_relaxed) < 2;
    const std::uint64_t sum_ns = (replace ? 0 : sum_ns_.load(std::memory_order_relaxed) / 2) + ns;
    const std::uint64_t sum_launches =
        (replace ? 0 : sum_launches_.load(std::memory_order_relaxed) / 2) + launches;
    sum_ns_.store(sum_ns, std::memory_order_relaxed);
    sum_launches_.store(sum_launches, std::memory_order_relaxed);
  }

  // Nanoseconds per launch (at least 1), or 0 while nothing was measured.
  std::uint64_t per_launch_ns() const {
    const std::uint64_t launches = sum_launches_.load(std::memory_order_relaxed);
    if (launches == 0) return 0;
    return std::max<std::uint64_t>(1, sum_ns_.load(std::memory_order_relaxed) / launches);
  }

 private:
  std::atomic<std::uint32_t> samples_{0};
  std::atomic<std::uint64_t> sum_ns_{0};
  std::atomic<std::uint64_t> sum_launches_{0};
};

}  // namespace gpuslice::limiter
