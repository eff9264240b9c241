#include "limiter/clock_correction.h"

#include <algorithm>
#include <limits>

namespace gpuslice::limiter {
namespace {

constexpr std::uint64_t kPermille = 1000;

// ln(x) for x in [1, 2] and exp(y) for y in [0, 1] by their series, without libm (the injected
// library links libc only): the ratio is clamped to where both converge in a few terms.
double log_near_one(double x) {
  const double z = (x - 1) / (x + 1);  // ln x = 2 artanh z; z <= 1/3
  const double z2 = z * z;
  double term = z;
  double sum = 0;
  for (int k = 1; k <= 21; k += 2) {
    sum += term / k;
    term *= z2;
  }
  return 2 * sum;
}

double exp_small(double y) {
  double term = 1;
  double sum = 1;
  for (int k = 1; k <= 16; ++k) {
    term *= y / k;
    sum += term;
  }
  return sum;
}

}  // namespace

std::uint64_t clock_factor_permille(std::uint32_t window_mhz, std::uint32_t reference_mhz) {
  if (window_mhz == 0 || reference_mhz == 0 || window_mhz <= reference_mhz) return kPermille;
  const double ratio = std::min(2.0, static_cast<double>(window_mhz) / reference_mhz);
  const double factor = exp_small(log_near_one(ratio) * kClockExponentMilli / kPermille);
  // Rounded to the nearest per mille in integers (lround is libm's).
  const std::uint64_t permille = (static_cast<std::uint64_t>(factor * 2 * kPermille) + 1) / 2;
  return std::clamp(permille, kPermille, kMaxClockFactorPermille);
}

void ClockReference::observe(std::uint32_t util_percent, std::uint32_t sm_mhz, bool power_capped) {
  const std::uint32_t since = since_power_cap_.load(std::memory_order_relaxed);
  since_power_cap_.store(power_capped ? 0 : std::min(since + 1, kPowerCapSamples), std::memory_order_relaxed);
  const std::uint32_t max = max_mhz();
  const bool deep_idle = max != 0 && sm_mhz != 0 && sm_mhz < max / 2;
  if (deep_idle) awake_samples_ = 0;
  const bool awake = awake_samples_ >= kWakeSamples;
  if (!deep_idle && !awake) ++awake_samples_;
  // Busy: awake, loaded, and below the idle reading.
  if (awake && util_percent >= kEstimateMinUtilPercent && util_percent <= 100 && sm_mhz != 0 &&
      (max == 0 || sm_mhz + kIdleMarginMhz < max)) {
    busy_mhz_[busy_next_] = sm_mhz;
    busy_next_ = (busy_next_ + 1) % kEstimateSamples;
    if (busy_count_ < kEstimateSamples) ++busy_count_;
    // The second lowest: one reading that dips below the flat-out clock does not set it.
    std::uint32_t lowest = std::numeric_limits<std::uint32_t>::max();
    std::uint32_t second = std::numeric_limits<std::uint32_t>::max();
    for (std::uint32_t i = 0; i < busy_count_; ++i) {
      const std::uint32_t mhz = busy_mhz_[i];
      if (mhz < lowest) {
        second = lowest;
        lowest = mhz;
      } else if (mhz < second) {
        second = mhz;
      }
    }
    lowest_busy_mhz_.store(busy_count_ >= kEstimateMinSamples ? second : 0, std::memory_order_relaxed);
  }
  if (util_percent < kFlatOutUtilPercent || util_percent > 100 || sm_mhz == 0) {
    flat_run_ = 0;
    return;
  }
  if (flat_run_ < kFlatOutSamples + kConfirmSamples) ++flat_run_;
  recent_mhz_[recent_next_] = sm_mhz;
  recent_next_ = (recent_next_ + 1) % recent_mhz_.size();
  if (flat_run_ < kFlatOutSamples + kConfirmSamples) return;
  // The clock read kConfirmSamples samples ago, a second into the run: the device has been flat out
  // since, by utilization readings that cover the instant it was read.
  counted_mhz_[counted_next_] = recent_mhz_[recent_next_];
  counted_next_ = (counted_next_ + 1) % kFlatOutSamples;
  if (counted_ < kFlatOutSamples) ++counted_;
  std::uint64_t sum = 0;
  for (std::uint32_t i = 0; i < counted_; ++i) sum += counted_mhz_[i];
  mhz_.store(static_cast<std::uint32_t>((sum + counted_ / 2) / counted_), std::memory_order_relaxed);
}

std::uint32_t ClockReference::estimate_mhz() const {
  if (since_power_cap_.load(std::memory_order_relaxed) >= kPowerCapSamples) return 0;
  return lowest_busy_mhz_.load(std::memory_order_relaxed);
}

std::uint32_t ClockReference::reference_for(std::uint32_t window_mhz) const {
  const std::uint32_t measured = mhz();
  if (measured != 0) return measured;
  // A window at or below the estimate is charged its GPU time (clock_factor_permille), as is one
  // whose clock was not read.
  return window_mhz == 0 ? 0 : estimate_mhz();
}

}  // namespace gpuslice::limiter
