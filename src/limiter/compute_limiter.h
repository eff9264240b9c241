// Compute (SM time) limiter. See docs/compute-limiter.md for the definition and the algorithm.
// The launch hooks call gate() before submitting work, and only when a limit is configured for the
// device: with no limit nothing here runs (no thread, no per-launch work beyond one branch).
//
// One ComputeLimiter per (process, device). Every process of the container points at the same
// shm::ComputeShared record, which holds the container's token bucket of device time.
#pragma once

#include <atomic>
#include <cstdint>

#include "abi/cuda_abi.h"
#include "common/clock.h"
#include "limiter/busy_probe.h"
#include "limiter/clock_correction.h"
#include "limiter/driver_ops.h"
#include "limiter/launch_cost.h"
#include "shared_state/compute_shared.h"

namespace gpuslice::limiter {

// Controller constants. The defaults are what the library uses; tests may shorten them.
struct Tuning {
  // Length of one on+off cycle when the container is continuously busy: the on phase (a
  // "window") lasts limit% of it. A 1 s window holds exactly two cycles. Not shorter: a GPU whose
  // power cap holds its clock down at full load boosts during idle gaps the power controller
  // averages over, and then does more than limit% of its full-load work per second (H100, bf16
  // matmul at 50%: +12% work per busy second at a 100 ms cycle, +6% at 500 ms, 0% at 2 s).
  std::uint64_t period_ns = 500'000'000;
  // Shortest window, so very low limits do not drain after every few launches.
  std::uint64_t min_window_ns = 2'000'000;
  // No launch (and no host sync) for this long ends the window: the device may have gone idle.
  std::uint64_t gap_ns = 1'000'000;
  // A drain that took longer than this found the device still busy.
  std::uint64_t busy_drain_ns = 20'000;
  // Throttled threads re-read the limit and the shared tokens at least this often.
  std::uint64_t max_sleep_ns = 10'000'000;
  // Device time that idle periods may bank, at most (scaled by 1 - limit): see burst_cap_ns().
  std::uint64_t max_bank_ns = 20'000'000;
  // Work a window may queue, by the measured cost of a launch: its launch cap is at most this over
  // the cost. The cost is wall time per launch, which depends on what else shares the device (two
  // processes of one container time-slice): a cost learnt while a process ran alone admitted twice
  // the work its window could run beside the other, which ran on past the on part (two processes at
  // 70% on a time-sliced simulated device: 1 s windows 0.59-0.89). Windows this long are re-measured
  // at each drain, so the last of an on part is sized by what the device gave them just before; a
  // process that starts mid-part makes the other's window run longer than it was sized by at most
  // this much (at 50 ms, 1 s windows 0.48-0.52 at 50%; at 25 ms within 0.3 points).
  std::uint64_t max_queued_ns = 25'000'000;
  // Launches allowed in the first window, before the cost of a launch has been measured.
  std::uint32_t initial_launch_cap = 2;
  // A window whose probe found the device busy at least this share (per mille) of its time is
  // charged in full: the probe's error is below it, and device-bound work charges exactly as before.
  std::uint32_t full_duty_permille = 900;
  // Whether windows are charged by the device time the busy probe measured (true), or by their
  // wall time as before (false: GPUSLICE_COMPUTE_BUSY=launches, no timing event is recorded).
  bool time_launches = true;
};

struct Stats {
  std::uint64_t busy_ns = 0;           // device time this process charged to the container
  std::uint64_t throttled_ns = 0;      // time launching threads of this process were held back
  std::uint64_t windows = 0;           // measuring windows closed
  std::uint64_t paused_windows = 0;    // of which ended by a pause in the launches
  std::uint64_t drains = 0;            // queue drains performed (ctx synchronize)
  std::uint64_t measured_windows = 0;  // charged below their wall time: the probe saw the device idle
  std::uint64_t launches = 0;          // launches of the closed windows
  std::uint64_t timed_launches = 0;    // of which the busy probe timed (two event records each)
  std::uint64_t clock_windows = 0;     // device-bound windows charged above their GPU time for the clock
  std::uint64_t clock_extra_ns = 0;    // what that added to their charge (clock_correction.h)
};

class ComputeLimiter {
 public:
  // `shared` is the device's budget in the container's state file; the limit in percent is read
  // from `limit_source` at every decision so live changes apply (0 or >= 100 = unlimited). The
  // pointer and `clock` must outlive the limiter.
  ComputeLimiter(Clock& clock, const DriverOps& ops, shm::ComputeShared* shared,
                 const std::atomic<unsigned>* limit_source, const Tuning& tuning = Tuning{});
  ComputeLimiter(const ComputeLimiter&) = delete;
  ComputeLimiter& operator=(const ComputeLimiter&) = delete;

  // Called before each kernel/graph launch on this device, from any thread. May sleep (throttle)
  // and may drain the queue to measure how long the device was busy. Under budget it is a few
  // relaxed atomic operations and one clock read: no lock, no allocation, no driver call, except for
  // the few launches of a window that its busy probe times (busy_probe.h). Returns true for those:
  // the caller then calls after_launch() on the same thread once the launch was submitted.
  // `waited_ns`: how long another gate (priority sharing) held this launch just before; the busy
  // probe leaves it out of a span already running, like its own time: a hold while a higher
  // priority's work runs is no measure of how busy this process keeps the device.
  bool gate(CUstream stream, std::uint64_t waited_ns = 0);
  void after_launch(CUstream stream);

  // Optional cross-container schedule. Containers whose kernels time-slice on one GPU each charge
  // wall time that the other partly used, so together they get less than their limits. A node-wide
  // coordinator (gpuslice-node) that knows every container's limit on the GPU can give each an
  // offset within a host-wide cycle of Tuning::period_ns (CLOCK_MONOTONIC): the container then
  // opens windows only inside [offset, offset + limit% of the period) of each cycle, so containers
  // take turns instead of overlapping. The value is read at each window; kNoPhase (or a null
  // source) means "whenever the budget allows". Must outlive the limiter.
  static constexpr std::uint64_t kNoPhase = ~0ULL;
  void set_phase_source(const std::atomic<std::uint64_t>* phase_offset_ns);

  // Optional: the device's SM clock and the clock it runs at flat out (clock_correction.h). With
  // both known, a window charged in full (device-bound) is charged its GPU time x
  // (f_window / f_reference)^0.455, f_window read once at its close: a container that the limit's
  // duty cycle lets run at a higher clock pays for the extra work. Null (the default), no reference
  // or a failed read: its GPU time, as before. Must outlive the limiter.
  void set_clock_source(const SmClockSource* source);

  // Called after the application's own synchronisation returned (cuCtxSynchronize,
  // cuStreamSynchronize, cuEventSynchronize, synchronous device-to-host copies): the device had
  // finished the work launched so far, which tells the limiter when a CPU pause began.
  void note_host_sync();

  // Called at exit or context teardown: charge outstanding work. Never sleeps.
  void settle();

  unsigned limit_percent() const;
  Stats stats() const;

 private:
  enum class CloseReason { Budget, Gap, Settle };

  bool try_become_closer();
  void release_closer();
  void wait_for_closer();
  void open_window(std::uint64_t now, unsigned limit, std::uint64_t budget);
  // Returns whether the window was charged in full (device-bound, or nothing measured).
  bool close_window(CUstream stream, CloseReason reason);
  std::uint64_t charge_scaled(std::uint64_t ns, std::uint64_t duty_permille);
  void abandon_window();
  CUresult drain_queue(CUstream stream);
  std::uint64_t wait_for_turn(bool on_cycle);
  std::uint64_t container_cycle_phase(std::uint64_t now);
  std::uint64_t phase_offset() const;
  void refill(std::uint64_t now, unsigned limit);
  std::uint64_t charge_interval(std::uint64_t start, std::uint64_t end, std::uint64_t clock_permille);
  std::uint32_t window_clock_mhz(std::uint32_t* reference_mhz) const;
  std::uint64_t window_budget_ns(unsigned limit) const;
  std::int64_t burst_cap_ns(unsigned limit) const;

  Clock& clock_;
  DriverOps ops_;
  shm::ComputeShared* shared_;
  const std::atomic<unsigned>* limit_source_;
  std::atomic<const std::atomic<std::uint64_t>*> phase_source_{nullptr};
  std::atomic<const SmClockSource*> clock_source_{nullptr};
  Tuning tuning_;

  // Current measuring window of this process; 0 = none open.
  std::atomic<std::uint64_t> window_start_ns_{0};
  std::atomic<std::uint64_t> window_budget_ns_{0};
  std::atomic<unsigned> window_limit_{0};
  std::atomic<std::uint32_t> window_launches_{0};
  std::atomic<std::uint32_t> launch_cap_{0};
  std::atomic<std::uint64_t> last_launch_ns_{0};
  std::atomic<std::uint64_t> last_sync_ns_{0};
  // Measured over dense windows: sizes launch_cap_ so that a deep queue of heavy kernels is drained
  // before it can overrun the window.
  LaunchCost launch_cost_;
  // Times a run of launches of each window on the device's timeline: the window is charged its wall
  // time times the share of it the device was busy (closer thread arms and reads it).
  BusyProbe probe_;
  bool probe_supported_ = false;
  // Closer only. Not every window is timed: one is when the windows timed so far hold at most
  // 1/kProbeShare of the launches (each timed launch costs two event records, and the share of
  // slowed launches is what moves a launch-bound process's median launch cost), when the last timed
  // one is kMaxProbeAgeNs old, or when no duty is known. The others are charged the last duty
  // measured (under the same check of the queue at their close).
  static constexpr std::uint64_t kProbeShare = 64;
  static constexpr std::uint64_t kMaxProbeAgeNs = 250'000'000;
  static constexpr std::uint32_t kMinCarriedTimed = 32;
  static constexpr std::uint64_t kMinCarriedSpanNs = 2'000'000;
  bool window_probed_ = false;
  // The next window is the first under a limit (at start, or after the limit was lifted, whether a
  // window was open then or not), so the queue is drained uncharged before it opens. Set by any
  // thread that sees no limit, taken by the closer.
  std::atomic<bool> drain_before_open_{true};
  bool have_duty_ = false;
  std::uint64_t last_duty_permille_ = 1000;
  std::uint64_t last_probe_ns_ = 0;
  // Closer only: the recent windows' launches (a decaying maximum), which size the next probe's stride.
  std::uint32_t last_window_launches_ = 0;
  // Closer only. The last window kept the device mostly idle (charged below its wall time): the
  // next one is short, and opens at once when out of debt, even in turns.
  bool last_window_light_ = false;

  // One thread at a time closes/opens windows; the others wait until it is done.
  std::atomic<bool> closing_{false};
  std::atomic<std::uint64_t> resume_at_ns_{0};

  std::atomic<std::uint64_t> busy_ns_{0};
  std::atomic<std::uint64_t> throttled_ns_{0};
  std::atomic<std::uint64_t> windows_{0};
  std::atomic<std::uint64_t> paused_windows_{0};
  std::atomic<std::uint64_t> drains_{0};
  std::atomic<std::uint64_t> measured_windows_{0};
  std::atomic<std::uint64_t> launches_{0};
  std::atomic<std::uint64_t> timed_launches_{0};
  std::atomic<std::uint64_t> clock_windows_{0};
  std::atomic<std::uint64_t> clock_extra_ns_{0};
};

}  // namespace gpuslice::limiter
