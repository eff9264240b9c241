#include "limiter/device_share.h"

#include <algorithm>

namespace gpuslice::limiter {

bool DeviceShare::before_launch(const DriverOps& ops, Clock& clock, CUstream stream, std::uint64_t now) {
  const std::uint32_t n = launches_.fetch_add(1, kRelaxed);
  std::uint64_t next = next_ns_.load(kRelaxed);
  // The first launch: lower ones learn of this container from its record from now on; their queued
  // work drains before the first span.
  if (next == 0 && next_ns_.compare_exchange_strong(next, now + timing_.settle_ns, kRelaxed))
    next = now + timing_.settle_ns;
  if (now >= next && measuring_.load(std::memory_order_acquire) && !armed_.load(kRelaxed) &&
      next_ns_.compare_exchange_strong(next, now + timing_.every_ns, kRelaxed)) {
    armed_.store(true, std::memory_order_release);
    probe_.arm(n);
  }
  return probe_.before_launch(ops, clock, stream, now, n);
}

bool DeviceShare::note_idle(const DriverOps& ops, std::uint64_t now) {
  if (!armed_.load(std::memory_order_acquire)) return false;
  const BusyProbe::Result span = probe_.collect(ops, now);
  armed_.store(false, std::memory_order_release);
  if (!span.valid || span.span_ns == 0) return false;  // still measuring: the next span tries again
  const auto sample =
      static_cast<std::int64_t>(std::min<std::uint64_t>(kPermille, span.busy_ns * kPermille / span.span_ns));
  const auto before = static_cast<std::int64_t>(mean_.load(kRelaxed));
  const std::int64_t mean = before == 0 ? sample : before + (sample - before) / (sample > before ? 2 : 4);
  const auto after =
      static_cast<std::uint32_t>(std::clamp<std::int64_t>(mean, 1, kPermille));  // 1+: measured
  mean_.store(after, kRelaxed);
  trusted_until_ns_.store(now + timing_.ttl_ns, kRelaxed);
  measuring_.store(false, std::memory_order_release);
  // Until tick() opens the next window, a launch finds nothing due in its one load and compare.
  next_ns_.store(~std::uint64_t{0}, kRelaxed);
  return true;
}

bool DeviceShare::tick(std::uint64_t now) {
  if (measuring_.load(std::memory_order_acquire) || now < trusted_until_ns_.load(kRelaxed)) return false;
  next_ns_.store(now + timing_.settle_ns, kRelaxed);
  measuring_.store(true, std::memory_order_release);
  return true;
}

}  // namespace gpuslice::limiter
