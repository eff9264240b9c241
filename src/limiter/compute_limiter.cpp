#include "limiter/compute_limiter.h"

#include <algorithm>
#include <limits>

#include "common/log.h"

namespace gpuslice::limiter {
namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;
constexpr auto kAcquire = std::memory_order_acquire;
constexpr auto kRelease = std::memory_order_release;
constexpr auto kAcqRel = std::memory_order_acq_rel;

// A refill never credits more than this much elapsed time: the bucket is capped far below it, and
// it keeps elapsed * percent from overflowing when the record was never refilled (refilled_at 0).
constexpr std::uint64_t kMaxRefillNs = 10'000'000'000ULL;
// How often a thread waiting for another thread's drain looks again.
constexpr std::uint64_t kCloserPollNs = 200'000;
// Shortest throttling sleep: below this a sleep costs more than it is worth.
constexpr std::uint64_t kMinNapNs = 20'000;

constexpr std::uint64_t kPermille = 1000;
// Launches a window of Tuning::max_queued_ns must hold for that bound to apply (open_window): 2 at
// 25 ms, so costs up to 12.5 ms (6 ms kernels beside another process) are re-measured within a part.
constexpr std::uint64_t kMinQueuedLaunches = 2;

bool unlimited(unsigned percent) { return percent == 0 || percent >= 100; }

std::uint64_t elapsed(std::uint64_t from, std::uint64_t to) { return to > from ? to - from : 0; }

std::atomic<bool> g_drain_error_logged{false};

}  // namespace

ComputeLimiter::ComputeLimiter(Clock& clock, const DriverOps& ops, shm::ComputeShared* shared,
                               const std::atomic<unsigned>* limit_source, const Tuning& tuning)
    : clock_(clock), ops_(ops), shared_(shared), limit_source_(limit_source), tuning_(tuning) {
  // Zeroes would make windows empty or sleeps spin; fall back to the defaults instead.
  const Tuning defaults;
  if (tuning_.period_ns == 0) tuning_.period_ns = defaults.period_ns;
  if (tuning_.min_window_ns == 0) tuning_.min_window_ns = defaults.min_window_ns;
  if (tuning_.gap_ns == 0) tuning_.gap_ns = defaults.gap_ns;
  if (tuning_.max_sleep_ns == 0) tuning_.max_sleep_ns = defaults.max_sleep_ns;
  if (tuning_.initial_launch_cap == 0) tuning_.initial_launch_cap = defaults.initial_launch_cap;
  if (tuning_.max_queued_ns == 0) tuning_.max_queued_ns = defaults.max_queued_ns;
  if (tuning_.full_duty_permille == 0 || tuning_.full_duty_permille > kPermille) {
    tuning_.full_duty_permille = defaults.full_duty_permille;
  }
  probe_supported_ = tuning_.time_launches && BusyProbe::supported(ops_);
}

unsigned ComputeLimiter::limit_percent() const {
  return limit_source_ != nullptr ? limit_source_->load(kRelaxed) : 0;
}

Stats ComputeLimiter::stats() const {
  Stats s;
  s.busy_ns = busy_ns_.load(kRelaxed);
  s.throttled_ns = throttled_ns_.load(kRelaxed);
  s.windows = windows_.load(kRelaxed);
  s.paused_windows = paused_windows_.load(kRelaxed);
  s.drains = drains_.load(kRelaxed);
  s.measured_windows = measured_windows_.load(kRelaxed);
  s.launches = launches_.load(kRelaxed);
  s.timed_launches = timed_launches_.load(kRelaxed);
  s.clock_windows = clock_windows_.load(kRelaxed);
  s.clock_extra_ns = clock_extra_ns_.load(kRelaxed);
  return s;
}

std::uint64_t ComputeLimiter::window_budget_ns(unsigned limit) const {
  return std::max(tuning_.min_window_ns, tuning_.period_ns / 100 * limit);
}

// Idle time banks at most (1-L) of max_bank_ns, so a container waking from idle cannot start with
// a long burst. The bank only absorbs the jitter of sleeps and of windows that end early.
std::int64_t ComputeLimiter::burst_cap_ns(unsigned limit) const {
  const std::uint64_t jitter = std::min(window_budget_ns(limit), tuning_.max_bank_ns) / 100 * (100 - limit);
  // Half a launch too, so that a part which had to leave less than half a launch unused can pass it
  // on (see wait_for_turn): with 100 ms kernels the parts' rounding is what sets the share.
  const std::uint64_t half_launch = std::min(launch_cost_.per_launch_ns() / 2, window_budget_ns(limit));
  // And a measured window's charge (see ComputeShared::measured_charge_ns), at most one window.
  const std::uint64_t measured =
      shared_ != nullptr ? std::min(shared_->measured_charge_ns.load(kRelaxed), window_budget_ns(limit)) : 0;
  return static_cast<std::int64_t>(std::max({jitter, half_launch, measured}));
}

bool ComputeLimiter::gate(CUstream stream, std::uint64_t waited_ns) {
  if (waited_ns != 0) [[unlikely]]
    probe_.exclude(waited_ns);
  const unsigned limit_now = limit_percent();
  if (unlimited(limit_now) || shared_ == nullptr) {
    // A limit lifted mid-window: forget the window rather than charge unthrottled time later. Lifted
    // between windows (a limited process waits most of its time), only the mark: what is queued from
    // now on is not the next limit's to charge either.
    if (window_start_ns_.load(kRelaxed) != 0) {
      abandon_window();
    } else if (!drain_before_open_.load(kRelaxed)) {
      drain_before_open_.store(true, kRelaxed);
    }
    return false;
  }
  std::uint64_t now = clock_.now_ns();
  bool on_cycle = false;
  for (;;) {
    if (closing_.load(kAcquire)) {
      wait_for_closer();
      if (unlimited(limit_percent())) return false;
      now = clock_.now_ns();
      continue;
    }
    const std::uint64_t start = window_start_ns_.load(kAcquire);
    if (start != 0) {
      const std::uint64_t last = std::max(last_launch_ns_.load(kRelaxed), last_sync_ns_.load(kRelaxed));
      const bool gap = elapsed(last, now) >= tuning_.gap_ns;
      // A lowered limit ends the window at once, so the new limit applies within one launch.
      const bool spent = elapsed(start, now) >= window_budget_ns_.load(kRelaxed) ||
                         window_launches_.load(kRelaxed) >= launch_cap_.load(kRelaxed) ||
                         limit_now < window_limit_.load(kRelaxed);
      if (!gap && !spent) break;  // the common case: inside the window
      if (!try_become_closer()) continue;
      if (window_start_ns_.load(kAcquire) != start) {  // another thread closed it meanwhile
        release_closer();
        now = clock_.now_ns();
        continue;
      }
      // A window charged below its wall time did not use its time: like after a pause, the next
      // one opens at once when out of debt (work below its limit is never delayed).
      on_cycle = close_window(stream, gap ? CloseReason::Gap : CloseReason::Budget) && !gap;
    } else {
      if (!try_become_closer()) continue;
      if (window_start_ns_.load(kAcquire) != 0) {
        release_closer();
        continue;
      }
      if (drain_before_open_.exchange(false, kRelaxed)) {
        // The first window under a limit: what was queued before it applied (up to the driver's
        // queue depth, launched while unlimited) runs first and is not charged to it.
        if (!stream_capturing(ops_, stream)) static_cast<void>(drain_queue(stream));
      }
    }
    std::uint64_t budget = wait_for_turn(on_cycle);
    now = clock_.now_ns();
    const unsigned limit = limit_percent();
    // A window charged by measured duty is charged in one piece when it closes; short ones keep
    // the pieces within what the bucket banks while other processes refill it.
    if (last_window_light_) budget = std::min(budget, std::max(tuning_.min_window_ns, tuning_.max_bank_ns));
    if (!unlimited(limit)) open_window(now, limit, budget);
    release_closer();
    if (unlimited(limit)) return false;
    break;
  }
  const std::uint32_t launch = window_launches_.fetch_add(1, kRelaxed);
  last_launch_ns_.store(now, kRelaxed);
  return probe_.before_launch(ops_, clock_, stream, now, launch);
}

void ComputeLimiter::after_launch(CUstream stream) { probe_.after_launch(ops_, clock_, stream); }

void ComputeLimiter::note_host_sync() { last_sync_ns_.store(clock_.now_ns(), kRelaxed); }

void ComputeLimiter::settle() {
  if (window_start_ns_.load(kAcquire) == 0 || shared_ == nullptr) return;
  if (!try_become_closer()) return;  // a thread is closing it right now and will charge it
  close_window(nullptr, CloseReason::Settle);
  release_closer();
}

bool ComputeLimiter::try_become_closer() {
  bool expected = false;
  return closing_.compare_exchange_strong(expected, true, kAcqRel);
}

void ComputeLimiter::release_closer() { closing_.store(false, kRelease); }

void ComputeLimiter::wait_for_closer() {
  while (closing_.load(kAcquire)) {
    if (unlimited(limit_percent())) return;
    const std::uint64_t now = clock_.now_ns();
    const std::uint64_t resume = resume_at_ns_.load(kRelaxed);
    // While the closer drains, the end is unknown: poll. During its off phase, sleep to its end.
    const std::uint64_t nap = resume > now ? std::min(resume - now, tuning_.max_sleep_ns) : kCloserPollNs;
    clock_.sleep_ns(nap);
    throttled_ns_.fetch_add(nap, kRelaxed);
  }
}

void ComputeLimiter::open_window(std::uint64_t now, unsigned limit, std::uint64_t budget) {
  // Only the closer thread adds to the cost and opens windows, so its two sums agree.
  const std::uint64_t per_launch = launch_cost_.per_launch_ns();
  std::uint64_t cap = tuning_.initial_launch_cap;
  if (per_launch != 0) {
    // At most max_queued_ns of work per window: a long on part is run as several windows, each
    // drained and its cost measured again, so a cost learnt under other conditions (alone, while
    // another process of the container was off) misjudges one short window, not the on part.
    // Not for long kernels (fewer than kMinQueuedLaunches in one): their windows are few launches,
    // measured at every close anyway, and the whole-kernel rounding of the part's cap (see
    // wait_for_turn) needs the part's whole length.
    // Rounded to the nearest launch, so that windows of long kernels end on average on time.
    const bool short_kernels = per_launch * kMinQueuedLaunches <= tuning_.max_queued_ns;
    const std::uint64_t queued = short_kernels ? std::min(budget, tuning_.max_queued_ns) : budget;
    cap = std::clamp<std::uint64_t>((queued + per_launch / 2) / per_launch, 1,
                                    std::numeric_limits<std::uint32_t>::max() / 2);
  }
  window_budget_ns_.store(budget, kRelaxed);
  window_limit_.store(limit, kRelaxed);
  launch_cap_.store(static_cast<std::uint32_t>(cap), kRelaxed);
  window_launches_.store(0, kRelaxed);
  last_launch_ns_.store(now, kRelaxed);
  resume_at_ns_.store(0, kRelaxed);
  // The probe times the window's first launches: the window opens on a drained queue, so no work
  // queued before the probe runs inside its span uncounted.
  window_probed_ = probe_supported_ &&
                   (!have_duty_ || timed_launches_.load(kRelaxed) * kProbeShare <= launches_.load(kRelaxed) ||
                    now - std::min(now, last_probe_ns_) >= kMaxProbeAgeNs);
  if (window_probed_) {
    // Every launch of the window's first 5 ms when windows are short; in longer ones (by the recent
    // windows' counts) every stride-th to the close, three quarters of the slots' worth.
    constexpr std::uint32_t kSpread = BusyProbe::kSlots * 3 / 4;
    probe_.arm(0, std::max<std::uint32_t>(1, last_window_launches_ / kSpread));
    last_probe_ns_ = now;
  }
  window_start_ns_.store(std::max<std::uint64_t>(now, 1), kRelease);  // 0 means "no window"
}

// Waits for everything the process queued (the context), or for `stream` where the driver ops offer
// no context-wide wait.
CUresult ComputeLimiter::drain_queue(CUstream stream) {
  if (ops_.ctx_synchronize != nullptr) return ops_.ctx_synchronize();
  if (ops_.stream_synchronize != nullptr) return ops_.stream_synchronize(stream);
  return CUDA_SUCCESS;
}

void ComputeLimiter::abandon_window() {
  if (!try_become_closer()) return;
  probe_.collect(ops_, clock_.now_ns(), /*read=*/false);
  window_probed_ = false;
  drain_before_open_.store(
      true, kRelaxed);  // the limit was lifted: what is queued from now on is not its to charge
  window_start_ns_.store(0, kRelease);
  release_closer();
}

bool ComputeLimiter::close_window(CUstream stream, CloseReason reason) {
  const std::uint64_t start = window_start_ns_.load(kAcquire);
  if (start == 0) return true;
  if (reason != CloseReason::Settle && stream_capturing(ops_, stream)) {
    // Launches being captured run nothing now; a drain would break the capture.
    probe_.collect(ops_, clock_.now_ns(), /*read=*/false);
    window_probed_ = false;
    window_start_ns_.store(0, kRelease);
    return true;
  }
  const std::uint32_t launches = window_launches_.load(kRelaxed);
  const bool first_window = launch_cost_.per_launch_ns() == 0;
  // The SM clock while the window's work runs: read before the drain, with the queue still busy. Not
  // at exit (settle): NVML's own teardown may have run by then.
  std::uint32_t reference_mhz = 0;
  const std::uint32_t window_mhz = reason != CloseReason::Settle ? window_clock_mhz(&reference_mhz) : 0;
  const std::uint64_t drain_start = clock_.now_ns();
  const CUresult rc = drain_queue(stream);
  const std::uint64_t drain_end = clock_.now_ns();
  drains_.fetch_add(1, kRelaxed);
  if (rc != CUDA_SUCCESS && !g_drain_error_logged.exchange(true, kRelaxed)) {
    GS_LOG(Debug, "compute limiter: drain returned CUresult %d; charging wall time", static_cast<int>(rc));
  }

  std::uint64_t end = drain_end;
  bool charge_drain = false;  // a busy drain after a capped pause: charged as a second interval
  const std::uint64_t last_launch = last_launch_ns_.load(kRelaxed);
  const std::uint64_t last_sync = last_sync_ns_.load(kRelaxed);
  // A process exiting long after its last launch ends its window on a pause too.
  const bool paused = reason == CloseReason::Gap ||
                      (reason == CloseReason::Settle &&
                       elapsed(std::max(last_launch, last_sync), drain_start) >= tuning_.gap_ns);
  if (paused) {
    const bool still_busy = elapsed(drain_start, drain_end) > tuning_.busy_drain_ns;
    if (!still_busy && last_sync >= last_launch) {
      // The application waited for its work after the last launch: the device was idle from then.
      end = std::max(last_sync, start);
    } else {
      // Unknown when the device went idle in the pause: count it as busy, but never more than one
      // window's budget of it. Queued work rarely outlasts that, and a drain slowed by the OS on
      // an idle device must not turn a long idle pause into a long debt.
      end = std::max(start, std::min(drain_start, last_launch + window_budget_ns_.load(kRelaxed)));
      charge_drain = still_busy;
    }
  }
  // The share of the window the device was busy, from the probe's events (busy_probe.h). A queue
  // that still held a tenth of the window's length at its close says the device was not idle at
  // the end, whatever the probe saw earlier: charged in full. A probe still running represents the
  // window up to its charged end (a host sync may have said the device went idle before the drain).
  // A window not timed is charged the last duty measured, under the same check of its queue.
  std::uint64_t duty = kPermille;
  const bool drained_idle = elapsed(drain_start, drain_end) * 10 <= elapsed(start, drain_start);
  launches_.fetch_add(launches, kRelaxed);
  // A decaying maximum: a window of few launches after dense ones keeps a stride that would cover
  // a dense one, so the next dense window is timed to its close rather than over its first part.
  last_window_launches_ = std::max(launches, last_window_launches_ - last_window_launches_ / 4);
  bool measured_here = false;
  if (window_probed_) {
    window_probed_ = false;
    const BusyProbe::Result probe = probe_.collect(ops_, end, /*read=*/true, launches);
    timed_launches_.fetch_add(probe.timed, kRelaxed);
    // Carried only when measured over enough of the workload: a window of a few launches (the first
    // one, or a few long kernels) is timed whole each time instead. Events that fail leave nothing.
    have_duty_ = probe.valid && (probe.timed >= kMinCarriedTimed || probe.span_ns >= kMinCarriedSpanNs);
    if (probe.valid) {
      std::uint64_t measured = kPermille;
      if (probe.busy_ns < probe.span_ns) measured = probe.busy_ns * kPermille / probe.span_ns;
      if (measured >= tuning_.full_duty_permille || !drained_idle) measured = kPermille;
      last_duty_permille_ = measured;
      measured_here = true;
    }
  }
  if ((measured_here || have_duty_) && drained_idle) duty = last_duty_permille_;
  std::uint64_t charged = 0;
  if (duty == kPermille) {
    // Oldest first: charge_interval() keeps the union with the container's other processes. Scaled
    // by the clock: device-bound work is what the duty cycle speeds up (clock_correction.h).
    const std::uint64_t clock = clock_factor_permille(window_mhz, reference_mhz);
    charged = charge_interval(start, end, clock);
    if (charge_drain) charged += charge_interval(std::max(end, drain_start), drain_end, clock);
  } else {
    // The device was idle most of the window, so its busy time does not overlap another process's
    // window the way time-sliced kernels do: no union, each process charges its own kernels.
    charged = charge_scaled(elapsed(start, end), duty);
    if (charge_drain) charged += charge_scaled(elapsed(std::max(end, drain_start), drain_end), duty);
    measured_windows_.fetch_add(1, kRelaxed);
    std::uint64_t largest = shared_->measured_charge_ns.load(kRelaxed);
    while (largest < charged &&
           !shared_->measured_charge_ns.compare_exchange_weak(largest, charged, kRelaxed)) {
    }
  }
  if (duty == kPermille) {
    // Device-bound work takes over: the bank shrinks back to its usual size within a few windows.
    shared_->measured_charge_ns.store(shared_->measured_charge_ns.load(kRelaxed) / 2, kRelaxed);
  }
  busy_ns_.fetch_add(charged, kRelaxed);
  windows_.fetch_add(1, kRelaxed);
  if (paused) paused_windows_.fetch_add(1, kRelaxed);

  if (reason == CloseReason::Budget && launches > 0) {
    // Wall time per launch of windows that were never idle: the device's cost when the queue was
    // the bottleneck, the CPU's launch interval otherwise. A short window of another thread's cheap
    // launches barely moves it (see LaunchCost).
    launch_cost_.add(std::max<std::uint64_t>(elapsed(start, end), launches), launches);
  }
  window_start_ns_.store(0, kRelease);
  last_window_light_ = duty != kPermille;
  // The first window (a couple of launches, to measure their cost) says nothing about the workload.
  return duty == kPermille && !first_window;
}

std::uint64_t ComputeLimiter::charge_scaled(std::uint64_t ns, std::uint64_t duty_permille) {
  const std::uint64_t charged = ns / kPermille * duty_permille + ns % kPermille * duty_permille / kPermille;
  shared_->tokens_ns.fetch_sub(static_cast<std::int64_t>(charged), kAcqRel);
  shared_->busy_total_ns.fetch_add(charged, kRelaxed);
  return charged;
}

// Charges [start, end) to the container, minus what another of its processes already charged:
// kernels of two processes of one container time-slice, so their busy intervals overlap. The bucket
// pays that GPU time x clock_permille / 1000; the busy totals (status, metrics) stay GPU time.
std::uint64_t ComputeLimiter::charge_interval(std::uint64_t start, std::uint64_t end,
                                              std::uint64_t clock_permille) {
  if (end <= start) return 0;
  std::uint64_t covered = shared_->covered_until_ns.load(kAcquire);
  for (;;) {
    if (covered >= end) return 0;
    if (shared_->covered_until_ns.compare_exchange_weak(covered, end, kAcqRel)) break;
  }
  const std::uint64_t busy = end - std::max(start, covered);
  std::uint64_t extra = 0;
  if (clock_permille > kPermille) {
    const std::uint64_t above = clock_permille - kPermille;
    extra = busy / kPermille * above + busy % kPermille * above / kPermille;
    clock_windows_.fetch_add(1, kRelaxed);
    clock_extra_ns_.fetch_add(extra, kRelaxed);
  }
  shared_->tokens_ns.fetch_sub(static_cast<std::int64_t>(busy + extra), kAcqRel);
  shared_->busy_total_ns.fetch_add(busy, kRelaxed);
  return busy;
}

// The device's SM clock now, where a source is set and its reference can correct: the window's
// reference (measured or estimated from this clock) in *reference_mhz. Else 0: nothing is scaled,
// and without a source or any way to correct nothing is read either.
std::uint32_t ComputeLimiter::window_clock_mhz(std::uint32_t* reference_mhz) const {
  const SmClockSource* source = clock_source_.load(kAcquire);
  if (source == nullptr || source->read_mhz == nullptr || source->reference == nullptr) return 0;
  if (!source->reference->can_correct()) return 0;
  const std::uint32_t mhz = source->read_mhz(source->arg);
  *reference_mhz = source->reference->reference_for(mhz);
  return *reference_mhz != 0 ? mhz : 0;
}

void ComputeLimiter::set_clock_source(const SmClockSource* source) { clock_source_.store(source, kRelease); }

void ComputeLimiter::refill(std::uint64_t now, unsigned limit) {
  std::uint64_t last = shared_->refilled_at_ns.load(kAcquire);
  if (now <= last) return;
  std::uint64_t span = now - last;
  std::uint64_t until = now;
  if (span > kMaxRefillNs) {
    span = kMaxRefillNs;
  } else {
    // Credit whole nanoseconds only and leave the remainder for the next refill: frequent small
    // refills would otherwise round the rate down.
    const std::uint64_t whole = span * limit / 100;
    if (whole == 0) return;
    until = last + (whole * 100 + limit - 1) / limit;
    span = until - last;
  }
  // Whoever moves refilled_at forward credits exactly that span, so processes never double-credit.
  if (!shared_->refilled_at_ns.compare_exchange_strong(last, until, kAcqRel)) return;
  const auto credit = static_cast<std::int64_t>(span * limit / 100);
  const std::int64_t cap = burst_cap_ns(limit);
  std::int64_t tokens = shared_->tokens_ns.fetch_add(credit, kAcqRel) + credit;
  while (tokens > cap && !shared_->tokens_ns.compare_exchange_weak(tokens, cap, kAcqRel)) {
  }
}

void ComputeLimiter::set_phase_source(const std::atomic<std::uint64_t>* phase_offset_ns) {
  phase_source_.store(phase_offset_ns, kRelease);
}

std::uint64_t ComputeLimiter::phase_offset() const {
  const std::atomic<std::uint64_t>* source = phase_source_.load(kAcquire);
  return source != nullptr ? source->load(kRelaxed) : kNoPhase;
}

// The container's own cycle: chosen by whichever of its processes opens the first window, so all
// of them open windows in the same part of every cycle.
std::uint64_t ComputeLimiter::container_cycle_phase(std::uint64_t now) {
  std::uint64_t anchor = shared_->cycle_anchor_ns.load(kAcquire);
  if (anchor == 0) {
    const std::uint64_t mine = now % tuning_.period_ns + 1;
    anchor = shared_->cycle_anchor_ns.compare_exchange_strong(anchor, mine, kAcqRel) ? mine : anchor;
  }
  return anchor - 1;
}

// Waits until the container may open a window. Returns the window's length.
// Each container has a cycle of period_ns whose first limit% is its on part (node-wide turns set
// where; otherwise the container's first window does). A container that used up its last window
// (`on_cycle`), or that takes turns, opens windows only in its on part: every on part then starts
// one period after the last, and a 1 s window holds whole cycles however the windows' lengths vary
// (kernel lengths, processes closing at different times). After a pause it may also open at once
// when its budget is out of debt, so work that stays below the limit is never delayed. Inside the
// on part, the debt the part itself ran up does not hold it back (a window cut short by its launch
// cap or a short pause reopens at once); older debt does.
std::uint64_t ComputeLimiter::wait_for_turn(bool on_cycle) {
  for (;;) {
    const unsigned limit = limit_percent();
    const std::uint64_t budget = window_budget_ns(limit);
    if (unlimited(limit)) return budget;
    const std::uint64_t now = clock_.now_ns();
    refill(now, limit);
    const std::int64_t tokens = shared_->tokens_ns.load(kAcquire);
    std::uint64_t phase = phase_offset();
    // Turns keep containers' device-bound windows apart; a container whose last window kept the
    // device mostly idle (launch-bound) runs outside its turn too, charged its own kernels' time.
    const bool strict = on_cycle || (phase != kNoPhase && !last_window_light_);
    if (phase == kNoPhase) phase = container_cycle_phase(now);
    if (!strict && tokens >= 0) return budget;
    const std::uint64_t period = tuning_.period_ns;
    // Position of `now` in the cycle, counted from the start of this container's on part.
    const std::uint64_t into_turn = (now % period + period - phase % period) % period;
    const std::int64_t deficit = -tokens - static_cast<std::int64_t>(into_turn);
    // A window admits whole launches. When less than half a launch's measured cost is left of the
    // on part, a launch there would run mostly past it (a 100 ms kernel at 30% would get 150 ms
    // twice per cycle); the part is over, and its leftover stays in the budget for later parts.
    // The banked credit counts with it, so what one part could not use because the launches did
    // not fit is used by a later one (error diffusion): long kernels average the limit exactly.
    const std::uint64_t left = into_turn < budget ? budget - into_turn : 0;
    const std::uint64_t credit = tokens > 0 ? static_cast<std::uint64_t>(tokens) : 0;
    const bool in_turn = left >= tuning_.min_window_ns && left + credit >= launch_cost_.per_launch_ns() / 2;
    if (in_turn && deficit <= 0) return left + credit;
    // In the on part, the allowance grows by 1 + limit% per ns; off it, the next on part comes
    // (and, unless strict, the end of the debt, at limit% per ns).
    std::uint64_t nap =
        in_turn ? static_cast<std::uint64_t>(deficit) * 100 / (100 + limit) + 1 : period - into_turn;
    if (!strict) nap = std::min(nap, static_cast<std::uint64_t>(-tokens) * 100 / limit + 1);
    nap = std::min(std::max(nap, kMinNapNs), tuning_.max_sleep_ns);
    resume_at_ns_.store(now + nap, kRelaxed);
    clock_.sleep_ns(nap);
    throttled_ns_.fetch_add(nap, kRelaxed);
  }
}

}  // namespace gpuslice::limiter
