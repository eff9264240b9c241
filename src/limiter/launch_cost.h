// The measured wall time of one launch, shared by the compute limiter (which sizes its windows'
// launch caps with it) and the priority gate (which bounds the work it keeps in flight).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace gpuslice::limiter {

// Sums of wall time and launches of the samples (the work between two drains), decayed at every
// sample by that sample's share of the launches (at most by half), so each sample counts by its
// launches: a few launches slowed by a CPU hiccup, or a run of short windows of another thread's
// cheap launches, barely move an estimate made of thousands, while a new workload takes over
// within a few samples. The first sample is rough (a first window's two launches, or a deep queue
// launched before anyone looked), so the second replaces it. One thread at a time adds; any
// thread may read.
class LaunchCost {
 public:
  void add(std::uint64_t ns, std::uint64_t launches) {
    if (launches == 0) return;
    const bool replace = samples_.fetch_add(1, std::memory_order_relaxed) < 2;
    const std::uint64_t added = launches << kFractionBits;
    std::uint64_t sum_ns = ns;
    std::uint64_t sum_launches = added;
    const std::uint64_t old_launches = sum_launches_.load(std::memory_order_relaxed);
    if (!replace && old_launches != 0) {
      // Keep (1 - share) of the old sums, where share = min(1/2, new launches / old launches).
      const std::uint64_t kept = old_launches - std::min(old_launches / 2, added);
      const auto old_ns = static_cast<unsigned __int128>(sum_ns_.load(std::memory_order_relaxed));
      sum_ns += static_cast<std::uint64_t>(old_ns * kept / old_launches);
      sum_launches += kept;
    }
    sum_ns_.store(sum_ns, std::memory_order_relaxed);
    sum_launches_.store(sum_launches, std::memory_order_relaxed);
  }

  // Nanoseconds per launch (at least 1), or 0 while nothing was measured.
  std::uint64_t per_launch_ns() const {
    const std::uint64_t launches = sum_launches_.load(std::memory_order_relaxed);
    if (launches == 0) return 0;
    const auto ns = static_cast<unsigned __int128>(sum_ns_.load(std::memory_order_relaxed)) << kFractionBits;
    return std::max<std::uint64_t>(1, static_cast<std::uint64_t>(ns / launches));
  }

 private:
  // Launches are summed in fixed point: halving a sum of single-launch samples (one long kernel per
  // window) in whole launches would keep it at 1 while the time doubled, and so double the cost.
  static constexpr unsigned kFractionBits = 16;
  std::atomic<std::uint32_t> samples_{0};
  std::atomic<std::uint64_t> sum_ns_{0};
  std::atomic<std::uint64_t> sum_launches_{0};
};

}  // namespace gpuslice::limiter
