// The device time of one launch by kernel, for the priority gate's in-flight bound: a bound that
// counts launches against the average cost of one lets a cluster of heavy kernels queue far more
// than the bound (docs/priority.md, "Limits of the approach"). Each launch is keyed by its kernel
// and grid (or graph); the cost of a key is learnt from the windows of launches whose total device
// time the gate measures, by projecting the keys' costs onto each window's measured total
// (Kaczmarz's method): windows of different mixes, as a training step's are, separate the keys.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace gpuslice::limiter {

// A key for a kernel launch: the function and the grid (one elementwise kernel serves every size).
// Never 0, which means "unknown" to the gate.
inline std::uint64_t kernel_key(const void* function, unsigned gx, unsigned gy, unsigned gz) {
  std::uint64_t h = reinterpret_cast<std::uintptr_t>(function);
  for (const std::uint64_t v : {std::uint64_t{gx}, std::uint64_t{gy}, std::uint64_t{gz}}) {
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  }
  return h == 0 ? 1 : h;
}

class KernelCosts {
 public:
  static constexpr std::size_t kSlots = 1024;

  // The learnt cost of a launch of `key`, or `fallback` (the average launch) for a key not known
  // (or whose slot another key took).
  std::uint64_t predict(std::uint64_t key, std::uint64_t fallback) const {
    const Slot& slot = slots_[index(key)];
    if (key == 0 || slot.key.load(std::memory_order_relaxed) != key) return fallback;
    return slot.cost_ns.load(std::memory_order_relaxed);
  }

  // Keys with a learnt cost (slots taken): what the exit statistics report.
  std::uint64_t known() const {
    std::uint64_t n = 0;
    for (const Slot& slot : slots_) n += slot.key.load(std::memory_order_relaxed) != 0 ? 1 : 0;
    return n;
  }

  // A window of launches (their keys, in order) took `ns` of device time. One thread at a time
  // learns (the gate's stepping thread); any thread may predict meanwhile (a torn pair of key and
  // cost is one launch mispredicted). `scratch` holds at least n keys.
  void learn(const std::uint64_t* keys, std::size_t n, std::uint64_t ns, std::uint64_t fallback,
             std::uint64_t* scratch) {
    if (n == 0 || ns == 0) return;
    // The window's error against its prediction, and the sum of its keys' squared counts: the
    // projection adds error * count / sum to each key's cost, so the window's prediction becomes
    // its measured time exactly.
    std::copy(keys, keys + n, scratch);
    std::sort(scratch, scratch + n);
    double predicted = 0;
    double counts_squared = 0;
    for (std::size_t i = 0; i < n;) {
      std::size_t j = i;
      while (j < n && scratch[j] == scratch[i]) ++j;
      const auto count = static_cast<double>(j - i);
      predicted += count * static_cast<double>(predict(scratch[i], fallback));
      counts_squared += count * count;
      i = j;
    }
    const double step = (static_cast<double>(ns) - predicted) / counts_squared;
    for (std::size_t i = 0; i < n;) {
      std::size_t j = i;
      while (j < n && scratch[j] == scratch[i]) ++j;
      const std::uint64_t key = scratch[i];
      Slot& slot = slots_[index(key)];
      const double old = static_cast<double>(predict(key, fallback));
      const double next = std::max(kMinCostNs, old + step * static_cast<double>(j - i));
      if (key != 0) {
        slot.key.store(key, std::memory_order_relaxed);
        slot.cost_ns.store(static_cast<std::uint64_t>(next), std::memory_order_relaxed);
      }
      i = j;
    }
  }

 private:
  // A kernel takes at least this long (a launch's own device time): a projection that would take a
  // cost below it keeps it here, so a cheap key never predicts nothing.
  static constexpr double kMinCostNs = 1000.0;

  struct Slot {
    std::atomic<std::uint64_t> key{0};
    std::atomic<std::uint64_t> cost_ns{0};
  };
  static std::size_t index(std::uint64_t key) { return (key ^ (key >> 29) ^ (key >> 47)) % kSlots; }
  std::array<Slot, kSlots> slots_{};
};

}  // namespace gpuslice::limiter
