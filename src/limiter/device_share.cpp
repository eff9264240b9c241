#include "limiter/device_share.h"

#include <algorithm>

namespace gpuslice::limiter {
namespace {
constexpr auto kRelaxed = std::memory_order_relaxed;
}

bool DeviceShare::before_launch(const DriverOps& ops, Clock& clock, CUstream stream, std::uint64_t now) {
  const std::uint32_t n = launches_.fetch_add(1, kRelaxed);
  std::uint64_t next = next_ns_.load(kRelaxed);
  if (now >= next && !armed_.load(kRelaxed) &&
      next_ns_.compare_exchange_strong(next, now + every_ns_, kRelaxed)) {
    armed_.store(true, std::memory_order_release);
    probe_.arm(n);
  }
  return probe_.before_launch(ops, clock, stream, now, n);
}

bool DeviceShare::note_idle(const DriverOps& ops, std::uint64_t now, std::uint32_t threshold_permille) {
  if (!armed_.load(std::memory_order_acquire)) return false;
  const BusyProbe::Result span = probe_.collect(ops, now);
  armed_.store(false, std::memory_order_release);
  if (!span.valid || span.span_ns == 0) return false;
  const auto sample =
      static_cast<std::uint32_t>(std::min<std::uint64_t>(kPermille, span.busy_ns * kPermille / span.span_ns));
  const std::uint32_t before = share_.load(kRelaxed);
  // A moving mean with weight 1/8 for the newest sample: one span that caught a heavy moment of a
  // host-bound server (its prefill before a hundred light decode steps) must not make it hold lower
  // ones until the next sample. At least 1: measured.
  const auto mean = before == 0
                        ? static_cast<std::int64_t>(sample)
                        : static_cast<std::int64_t>(before) +
                              (static_cast<std::int64_t>(sample) - static_cast<std::int64_t>(before)) / 8;
  const auto after = static_cast<std::uint32_t>(std::clamp<std::int64_t>(mean, 1, kPermille));
  share_.store(after, kRelaxed);
  const bool crossed = (before < threshold_permille) != (after < threshold_permille);
  const std::uint32_t moved = after > before ? after - before : before - after;
  return before == 0 || crossed || moved * 20 >= kPermille;
}

}  // namespace gpuslice::limiter
