#include "limiter/priority_floor.h"

#include <algorithm>

#include "common/log.h"

namespace gpuslice::limiter {
namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;
constexpr auto kAcquire = std::memory_order_acquire;
constexpr auto kRelease = std::memory_order_release;

std::uint64_t elapsed(std::uint64_t from, std::uint64_t to) { return to > from ? to - from : 0; }

}  // namespace

bool PriorityFloor::admits(std::uint64_t now, std::uint64_t held_since, bool held) {
  const std::uint64_t percent = percent_;
  if (percent == 0) return false;
  if (now < open_until_ns_.load(kAcquire)) return true;
  if (!held && credit_ns_.load(kRelaxed) == 0) return false;
  if (busy_.exchange(true, kAcquire)) return false;  // another thread is accounting
  const std::uint64_t last = updated_ns_.load(kRelaxed);
  updated_ns_.store(now, kRelaxed);
  const auto cap = static_cast<std::int64_t>(window_ns_ / 100 * percent);
  std::int64_t credit = credit_ns_.load(kRelaxed);
  if (held) {
    // Up to this hold, the container was admitted (launching, or not launching at all): spent.
    credit -= static_cast<std::int64_t>(elapsed(last, held_since) / 100 * (100 - percent));
    credit = std::max<std::int64_t>(credit, 0);
    credit += static_cast<std::int64_t>(elapsed(std::max(last, held_since), now) / 100 * percent);
  } else {
    credit -= static_cast<std::int64_t>(elapsed(last, now) / 100 * (100 - percent));
  }
  credit = std::clamp<std::int64_t>(credit, 0, cap);
  bool admit = false;
  if (held && credit >= cap) {
    credit -= static_cast<std::int64_t>(slice_ns_ / 100 * (100 - percent));
    // The slice itself is neither held nor charged again.
    updated_ns_.store(now + slice_ns_, kRelaxed);
    open_until_ns_.store(now + slice_ns_, kRelease);
    slices_.fetch_add(1, kRelaxed);
    admit = true;
  }
  credit_ns_.store(credit, kRelaxed);
  busy_.store(false, kRelease);
  // At most one per slice / floor_percent; its time lets a benchmark place it against a tail.
  if (admit) {
    GS_LOG(Debug, "priority gate: floor slice at %llu us", static_cast<unsigned long long>(now / 1000));
  }
  return admit;
}

}  // namespace gpuslice::limiter
