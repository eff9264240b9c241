// The SM clock's part in a compute limit (docs/compute-limiter.md, "Throughput vs occupancy"). A
// device that is duty-cycled by a limit runs its kernels at a higher SM clock than flat out (the
// power controller averages over the idle gaps), so a container held to L% of the device's time did
// up to 2-4 points more than L% of its work on an H200. The limiter therefore charges a window of
// device-bound work its GPU time scaled by (f_window / f_reference)^kClockExponent: f_window is the
// SM clock while the window ran (read once, at its close), f_reference the clock at which the device
// last ran flat out (ClockReference). Without a reference, or without a clock, nothing is scaled.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

namespace gpuslice::limiter {

// Measured, not derived: on H200s (2026-11-27/28, 48 phases of graph replay, torch.compile, an eager
// mix, four streams, clusters and 40 ms kernels at 20/30/50/80%) throughput under a limit was the
// CUPTI-timed GPU-time share x (f_phase / f_unlimited)^0.455 within +-1 point in every phase
// (bench/results/clock-fit-2026-11-29/). Half of one-for-one: the sampled clock catches the boost
// between kernels too, and a matmul's speed is not all SM clock.
inline constexpr std::uint32_t kClockExponentMilli = 455;
// The most a clock reading may scale a window's charge, per mille: (1980 / 1400)^0.455 is about
// 1.17 on an H200, so a bogus reading cannot charge a window more than a quarter above its time.
inline constexpr std::uint64_t kMaxClockFactorPermille = 1250;

// (window_mhz / reference_mhz)^0.455 in per mille, at least 1000 (a window at or below the
// reference clock is charged its GPU time: never less, whatever the reading) and at most
// kMaxClockFactorPermille. 1000 when either is 0 (not known).
std::uint64_t clock_factor_permille(std::uint32_t window_mhz, std::uint32_t reference_mhz);

// The SM clock at which the device last ran flat out, from samples of the device's utilization and
// SM clock (the library's watcher takes one every 100 ms, off the launch path). A sample's clock
// counts once the device has been busy kFlatOutUtilPercent or more of NVML's utilization period in
// kFlatOutSamples samples in a row (a second) and in the kConfirmSamples samples after it: then no
// limit duty-cycled it (an on part lasts at most half a second, and a sample across its off part
// reads well below 95%), and its clock is the one the power controller holds under full load, for
// whatever ran on it. The samples after it are needed because the utilization shows the end of a
// flat-out stretch late while the clock shows it at once (bench/results/clock-reference-2026-11-29/):
// NVML's utilization is the busy share of the driver's last completed period (200 ms on an H200),
// so the first sample after a limit starts duty-cycling the device (or the process stops) reads
// 100% busy at a clock already raised toward the idle boost (1,770-1,965 MHz against 1,390 flat out);
// and the first on parts of a limit set live can leave gaps too short for NVML to see while the clock
// is already the duty-cycled one (1,500-1,545 MHz at 95-100% busy against 1,475, for half a
// second). Counting those held an H200's reference up to 245 MHz high. The reference is the mean of the
// last kFlatOutSamples counted clocks (the last second flat out: an H200's flat-out clock swings by
// 50-90 MHz over about a second) and stays while the device is duty-cycled: that is the state it
// exists for. One thread observes (the watcher); readers (the limiter's closer) load atomics.
//
// Until a flat-out second is seen (a container limited from its first launch never sees one), the
// reference is estimated as the second lowest clock the device ran at while busy in the latest
// kEstimateSamples busy samples (busy: at least kEstimateMinUtilPercent utilization and a clock
// below NVML's maximum, which an idle H200 reads within 100 ms). An H200 duty-cycled by a limit
// runs its on parts close to its flat-out clock (two processes of graph replay at 40% and 70%:
// 1,575-1,665 MHz against 1,565 flat out; such phases' mean clocks, 1,700-1,820 MHz, are mostly
// idle readings at the maximum), so the lowest busy clock is at or above the flat-out one: -4 to
// +66 MHz at 50-80% over the samples of 92 H200 phases replayed
// (bench/results/clock-estimate-2026-11-29/), up to +437 at 20-30%, where a phase has few busy
// samples and its on parts run hotter; above it, a window is charged less than a measured reference
// would charge it, never more. The second lowest, so that one reading that dips does not set it.
// The first second after the watcher starts or the device leaves its deep idle clock (below half
// the maximum) is not taken: an H200 waking for a process started under 70% ran its first busy
// samples at 1,545-1,575 MHz at a fifth of its power, where its on parts later ran at 1,635-1,680
// and flat out at 1,605 (bench/results/gpu-2026-11-29-e, call 1). The earlier estimate, max - (max
// - window) / duty, was fitted on phase mean clocks but applied to a window's busy clock, and put
// graph2p's flat-out clock at 1,180-1,525 MHz (2 points under the limit at 40%). No estimate unless
// the software power cap held the clocks in one of the last kPowerCapSamples samples (a clock
// locked or set by the operator is its own flat-out clock).
class ClockReference {
 public:
  static constexpr std::uint32_t kFlatOutUtilPercent = 95;
  static constexpr std::uint32_t kFlatOutSamples = 10;
  static constexpr std::uint32_t kConfirmSamples = 6;
  static constexpr std::uint32_t kEstimateSamples = 30;
  static constexpr std::uint32_t kEstimateMinSamples = 5;
  static constexpr std::uint32_t kEstimateMinUtilPercent = 10;
  // Samples skipped after the watcher starts and after the device leaves its deep idle clock.
  static constexpr std::uint32_t kWakeSamples = 10;
  static constexpr std::uint32_t kPowerCapSamples = 10;

  // One sample: utilization in percent over NVML's last period, SM clock in MHz (0: unknown), and
  // whether the software power cap was holding the clocks down (NVML's clock event reasons).
  void observe(std::uint32_t util_percent, std::uint32_t sm_mhz, bool power_capped = false);
  // NVML's maximum SM clock of the device (0: unknown), read once by the watcher: clocks at it (or
  // within kIdleMarginMhz) are idle readings, not busy ones.
  static constexpr std::uint32_t kIdleMarginMhz = 30;
  void set_max_mhz(std::uint32_t mhz) { max_mhz_.store(mhz, std::memory_order_relaxed); }
  // The reference clock in MHz, 0 while none was seen.
  std::uint32_t mhz() const { return mhz_.load(std::memory_order_relaxed); }
  std::uint32_t max_mhz() const { return max_mhz_.load(std::memory_order_relaxed); }
  // The estimate above in MHz, 0 while there is none (too few busy samples, or no power cap seen).
  std::uint32_t estimate_mhz() const;
  // Whether a window's clock is worth reading: a reference is known or estimated.
  bool can_correct() const { return mhz() != 0 || estimate_mhz() != 0; }
  // The reference for a window that ran at `window_mhz`: the measured one, else the estimate above,
  // else 0 (nothing known: the window is charged its GPU time).
  std::uint32_t reference_for(std::uint32_t window_mhz) const;

 private:
  std::atomic<std::uint32_t> mhz_{0};
  std::atomic<std::uint32_t> max_mhz_{0};
  std::atomic<std::uint32_t> lowest_busy_mhz_{0};  // the estimate, before the power cap's check
  std::atomic<std::uint32_t> since_power_cap_{kPowerCapSamples};  // samples since the cap was last seen
  // Observer only: flat-out samples in a row (up to kFlatOutSamples + kConfirmSamples), the clocks
  // of this run's latest kConfirmSamples + 1 samples (the oldest is next to be overwritten), and the
  // last kFlatOutSamples counted clocks.
  std::uint32_t flat_run_ = 0;
  std::array<std::uint32_t, kConfirmSamples + 1> recent_mhz_{};
  std::uint32_t recent_next_ = 0;
  std::array<std::uint32_t, kFlatOutSamples> counted_mhz_{};
  std::uint32_t counted_next_ = 0;
  std::uint32_t counted_ = 0;
  std::array<std::uint32_t, kEstimateSamples> busy_mhz_{};  // the latest busy samples' clocks
  std::uint32_t busy_next_ = 0;
  std::uint32_t busy_count_ = 0;
  std::uint32_t awake_samples_ = 0;  // samples since the watcher started or the device left deep idle
};

// Where a limiter reads its device's SM clock (ComputeLimiter::set_clock_source). `read_mhz` costs
// about 1-2 us (NVML); the limiter calls it at most once per window, on the thread that closes it,
// just before its drain, and only while `reference` can correct (can_correct()). Returns 0 when it
// cannot read it (no NVML, an error): that window is charged its GPU time.
struct SmClockSource {
  std::uint32_t (*read_mhz)(const void* arg) = nullptr;
  const void* arg = nullptr;
  const ClockReference* reference = nullptr;
};

}  // namespace gpuslice::limiter
