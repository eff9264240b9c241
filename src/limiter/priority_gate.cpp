#include "limiter/priority_gate.h"

#include <algorithm>

#include "common/log.h"

namespace gpuslice::limiter {
namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

// Shortest hold sleep: below this a sleep costs more than it is worth.
constexpr std::uint64_t kMinNapNs = 20'000;

std::uint64_t elapsed(std::uint64_t from, std::uint64_t to) { return to > from ? to - from : 0; }

}  // namespace

PriorityGate::PriorityGate(Clock& clock, const DriverOps& ops, PeerBoard* board,
                           const std::atomic<std::uint32_t>* priority_source, const PriorityTuning& tuning,
                           const std::atomic<std::uint32_t>* ceiling_source)
    : clock_(clock),
      ops_(ops),
      board_(board),
      priority_source_(priority_source),
      ceiling_source_(ceiling_source),
      tuning_(tuning),
      watch_(board, watch_timing(tuning)),
      floor_(make_floor(tuning)),
      share_(share_timing(tuning)),
      bound_(clock, ops, bound_settings(tuning)) {
  share_supported_ = DeviceShare::supported(ops_);
  // Zeroes would make sleeps spin or the bound admit nothing; fall back to the defaults instead.
  const PriorityTuning defaults;
  if (tuning_.in_flight_bound_ns == 0) tuning_.in_flight_bound_ns = defaults.in_flight_bound_ns;
  if (tuning_.refresh_ns == 0) tuning_.refresh_ns = defaults.refresh_ns;
  if (tuning_.absent_refresh_ns < tuning_.refresh_ns) tuning_.absent_refresh_ns = tuning_.refresh_ns;
  if (tuning_.held_poll_ns == 0 || tuning_.held_poll_ns > tuning_.refresh_ns)
    tuning_.held_poll_ns = tuning_.refresh_ns;
  if (tuning_.busy_horizon_ns == 0) tuning_.busy_horizon_ns = defaults.busy_horizon_ns;
  if (tuning_.sync_lease_ns == 0) tuning_.sync_lease_ns = defaults.sync_lease_ns;
  if (tuning_.stale_ns == 0) tuning_.stale_ns = defaults.stale_ns;
  if (tuning_.floor_window_ns == 0) tuning_.floor_window_ns = defaults.floor_window_ns;
  if (tuning_.floor_slice_ns == 0) tuning_.floor_slice_ns = defaults.floor_slice_ns;
  tuning_.floor_percent = std::min(tuning_.floor_percent, 100U);
}

// The watch's timing from the tuning, with the same fallbacks as the gate's own.
PeerWatch::Timing PriorityGate::watch_timing(const PriorityTuning& tuning) {
  const PriorityTuning defaults;
  PeerWatch::Timing t;
  t.refresh_ns = tuning.refresh_ns != 0 ? tuning.refresh_ns : defaults.refresh_ns;
  t.absent_refresh_ns = std::max(tuning.absent_refresh_ns, t.refresh_ns);
  t.stale_ns = tuning.stale_ns != 0 ? tuning.stale_ns : defaults.stale_ns;
  t.light_share_permille = tuning.light_share_permille;
  t.max_claim_ns = (tuning.sync_lease_ns != 0 ? tuning.sync_lease_ns : defaults.sync_lease_ns) +
                   (tuning.busy_horizon_ns != 0 ? tuning.busy_horizon_ns : defaults.busy_horizon_ns);
  return t;
}

// The floor's settings come from the tuning once its zeroes were replaced by the defaults.
PriorityFloor PriorityGate::make_floor(const PriorityTuning& tuning) {
  const PriorityTuning defaults;
  return PriorityFloor(tuning.floor_percent,
                       tuning.floor_window_ns != 0 ? tuning.floor_window_ns : defaults.floor_window_ns,
                       tuning.floor_slice_ns != 0 ? tuning.floor_slice_ns : defaults.floor_slice_ns);
}

// The device share's timing from the tuning (0: the defaults).
DeviceShare::Timing PriorityGate::share_timing(const PriorityTuning& tuning) {
  DeviceShare::Timing t;
  if (tuning.share_every_ns != 0) t.every_ns = tuning.share_every_ns;
  if (tuning.share_ttl_ns != 0) t.ttl_ns = tuning.share_ttl_ns;
  return t;
}

// The bound's settings from the tuning, with the same fallbacks as the gate's own.
InFlightBound::Settings PriorityGate::bound_settings(const PriorityTuning& tuning) {
  const PriorityTuning defaults;
  InFlightBound::Settings s;
  s.whole_ns = tuning.in_flight_bound_ns != 0 ? tuning.in_flight_bound_ns : defaults.in_flight_bound_ns;
  s.initial_launch_cap =
      tuning.initial_launch_cap != 0 ? tuning.initial_launch_cap : defaults.initial_launch_cap;
  s.per_kernel_cost = tuning.per_kernel_cost;
  s.long_kernels_alone = tuning.long_kernels_alone;
  return s;
}

Priority PriorityGate::priority() const {
  const std::uint32_t raw = priority_source_ != nullptr ? priority_source_->load(kRelaxed) : kNoPriority;
  if (ceiling_source_ == nullptr) return priority_from_value(raw).value_or(Priority::Normal);
  return resolved_priority(raw,
                           priority_from_value(ceiling_source_->load(kRelaxed)).value_or(Priority::Normal));
}

PriorityStats PriorityGate::stats() const {
  PriorityStats s;
  s.held_back_ns = held_back_ns_.load(kRelaxed);
  s.holds = holds_.load(kRelaxed);
  s.drains = bound_.drains();
  s.event_waits = bound_.event_waits();
  s.floor_slices = floor_.slices();
  s.publishes = publishes_.load(kRelaxed);
  s.scans = watch_.scans();
  s.rereads = watch_.rereads();
  s.kernels_costed = bound_.kernels_costed();
  s.long_kernels = bound_.long_kernels();
  return s;
}

bool PriorityGate::time_launch(CUstream stream) {
  if (!share_supported_ || priority() == Priority::Low) return false;  // nobody below to tell
  return share_.before_launch(ops_, clock_, stream, clock_.now_ns());
}

void PriorityGate::after_launch(CUstream stream) { share_.after_launch(ops_, clock_, stream); }

std::uint64_t PriorityGate::gate(CUstream stream, std::uint64_t kernel) {
  std::uint64_t now = clock_.now_ns();
  const std::uint64_t entered = now;
  if (sync_return_ns_.load(kRelaxed) != 0) {
    const std::uint64_t returned = sync_return_ns_.exchange(0, kRelaxed);
    if (returned != 0) grace_pays_.store(now - std::min(now, returned) < tuning_.resume_grace_ns, kRelaxed);
  }
  announce_busy(now);
  if (priority() == Priority::High) {
    // Nobody above: nothing to read or bound. The launch still counts for note_host_sync: a sync
    // that returns after another thread launched must not say idle.
    last_launch_ns_.store(now, kRelaxed);
    return 0;
  }
  PeerWatch::Summary summary = watch_.look(now, false, priority());
  if (!summary.higher_present) {
    // Nobody above us: no bound and no bookkeeping.
    bound_.forget_window();
    last_launch_ns_.store(now, kRelaxed);
    return 0;
  }
  const auto bound_at = [this](std::uint64_t t) { return bound_now(t); };
  const std::uint64_t hold_start = now;
  bool held = false;
  bool probing = false;  // debug diagnostics: how long the queue before the hold took
  std::uint64_t queue_done_ns = 0;
  std::uint64_t held_ns = 0;
  bool waited = false;  // stepped: waited for queued work
  for (;;) {
    const std::uint64_t round_start = now;
    bool held_now = false;
    while (summary.higher_busy_until_ns > now) {
      if (floor_.admits(now, hold_start, true)) break;
      if (!held) {
        held = true;
        holds_.fetch_add(1, kRelaxed);
        bound_.note_hold();
        // With the release below, lets a benchmark tell whether a higher priority's slow request
        // had this container held, and how much it had queued then (the window, its predicted
        // device time, the launch cap of a count and the average launch).
        GS_LOG(Debug,
               "priority gate: held at %llu us, %u launches in the window (%llu us predicted), "
               "cap %llu, %llu ns a launch",
               static_cast<unsigned long long>(now / 1000), bound_.window_launches(),
               static_cast<unsigned long long>(bound_.window_predicted_ns() / 1000),
               static_cast<unsigned long long>(bound_.launch_cap(now, bound_at)),
               static_cast<unsigned long long>(bound_.per_launch_ns()));
        probing = log::enabled(log::Level::Debug) && bound_.start_queue_probe(stream);
      }
      held_now = true;
      clock_.sleep_ns(
          std::max(kMinNapNs, std::min(tuning_.held_poll_ns, summary.higher_busy_until_ns - now)));
      now = clock_.now_ns();
      if (probing && queue_done_ns == 0 && bound_.queue_probe_done()) queue_done_ns = now;
      summary = watch_.look(now, true, priority());
    }
    if (held_now) held_ns += elapsed(round_start, now);
    if (!bound_.step_if_due(stream, now, kernel, bound_at)) break;
    waited = true;
    now = clock_.now_ns();
    // While the bound ramps up, the higher one went idle moments ago and may resume any time (a
    // server between two requests of a burst): each step, a wait for the device, is also a look
    // at its record, so this launch does not go in front of its next request.
    // A bound sized by the higher one's requests stays below the whole one, so its steps keep
    // looking: a request finds only its share queued if the next launch is held at once.
    if (bound_now(now) >= tuning_.in_flight_bound_ns) break;
    summary = watch_.look(now, true, priority());
    if (summary.higher_busy_until_ns <= now) break;
  }
  if (held) {
    if (probing) {
      if (queue_done_ns != 0) {
        GS_LOG(Debug, "priority gate: released at %llu us, queued work done %llu us into the hold",
               static_cast<unsigned long long>(now / 1000),
               static_cast<unsigned long long>((queue_done_ns - hold_start) / 1000));
      } else {
        GS_LOG(Debug, "priority gate: released at %llu us, queued work still running",
               static_cast<unsigned long long>(now / 1000));
      }
      bound_.end_queue_probe();
    } else {
      GS_LOG(Debug, "priority gate: released at %llu us", static_cast<unsigned long long>(now / 1000));
    }
    held_back_ns_.fetch_add(held_ns, kRelaxed);
    // Time spent held is time the container was busy: keep its own record busy across it.
    announce_busy(now);
  } else {
    floor_.admits(now, now, false);
  }
  bound_.count_launch(stream, now, kernel);
  last_launch_ns_.store(now, kRelaxed);
  return held || waited ? elapsed(entered, now) : 0;
}

// A container is busy from its first launch after idling. Only a change is published: the record
// then says busy for busy_horizon_ns, renewed by launches when half of it is left. Low has nobody
// below it to tell.
void PriorityGate::announce_busy(std::uint64_t now) {
  if (priority() == Priority::Low) return;
  if (period_start_ns_.load(kRelaxed) == 0) period_start_ns_.store(now, kRelaxed);
  const std::uint64_t until = busy_until_ns_.load(kRelaxed);
  if (until >= now + tuning_.busy_horizon_ns / 2) return;
  busy_until_ns_.store(now + tuning_.busy_horizon_ns, kRelaxed);
  publish_own(now);
}

void PriorityGate::note_sync_begin() {
  const std::uint64_t now = clock_.now_ns();
  sync_begin_ns_.store(now, kRelaxed);
  if (priority() == Priority::Low) return;
  // Only work this container launched keeps it busy while it waits; an idle sync says nothing (nor
  // does one in the grace after a wait, when nothing was launched since).
  const std::uint64_t until = busy_until_ns_.load(kRelaxed);
  if (until <= now || until >= now + tuning_.sync_lease_ns / 2) return;
  if (until == grace_until_ns_.load(kRelaxed)) return;
  busy_until_ns_.store(now + tuning_.sync_lease_ns, kRelaxed);
  publish_own(now);
}

void PriorityGate::note_host_sync() {
  const std::uint64_t now = clock_.now_ns();
  // The queue was empty when the sync returned: the in-flight window starts over.
  bound_.note_host_sync();
  // Idle at once (or after the grace) when nothing was launched since the wait began, so lower
  // priorities resume without waiting for the horizon to pass.
  if (last_launch_ns_.load(kRelaxed) > sync_begin_ns_.load(kRelaxed)) return;
  // Every event recorded before the wait has completed: the share's span, if one ran, is read.
  const bool share_moved = share_supported_ && priority() != Priority::Low && share_.note_idle(ops_, now);
  const bool period_moved = note_period_end(now);
  const std::uint64_t until = busy_until_ns_.load(kRelaxed);
  // Published as is: once past, it tells lower priorities since when this container is idle.
  sync_return_ns_.store(now, kRelaxed);
  const std::uint64_t idle_at = now + (grace_pays_.load(kRelaxed) ? tuning_.resume_grace_ns : 0);
  if (until <= idle_at) {  // already idle, or idle within the grace
    if (share_moved || period_moved) publish_own(now);
    return;
  }
  grace_until_ns_.store(idle_at, kRelaxed);
  busy_until_ns_.store(idle_at, kRelaxed);
  publish_own(now);
}

// A wait found this container's work done: the busy period its first launch after the previous one
// began has ended. Its moving mean (weight 1/4) is what lower ones size their bound by; true when it
// moved by more than 1/8, so the record is worth re-publishing now rather than at the heartbeat.
bool PriorityGate::note_period_end(std::uint64_t now) {
  const std::uint64_t start = period_start_ns_.exchange(0, kRelaxed);
  if (start == 0 || start >= now || priority() == Priority::Low) return false;
  const std::uint64_t period = now - start;
  const std::uint64_t mean = busy_period_ns_.load(kRelaxed);
  const std::uint64_t next = mean == 0 ? period : mean - mean / 4 + period / 4;
  busy_period_ns_.store(next, kRelaxed);
  const std::uint64_t moved = next > mean ? next - mean : mean - next;
  return mean == 0 || moved > mean / 8;
}

void PriorityGate::heartbeat() {
  const std::uint64_t now = clock_.now_ns();
  // A measured share is re-measured once it is old: the record then says "not measured".
  if (share_supported_ && priority() != Priority::Low) share_.tick(now);
  publish_own(now);
}

void PriorityGate::settle() {
  busy_until_ns_.store(0, kRelaxed);
  publish_own(clock_.now_ns());
}

void PriorityGate::publish_own(std::uint64_t now) {
  if (board_ == nullptr) return;
  PeerView own;
  own.priority = priority();
  own.heartbeat_ns = now;
  own.busy_until_ns = busy_until_ns_.load(kRelaxed);  // past: idle since then
  own.held_back_ns = held_back_ns_.load(kRelaxed);
  own.device_share_permille = share_.permille();
  own.busy_period_ns = busy_period_ns_.load(kRelaxed);
  board_->publish(own);
  publishes_.fetch_add(1, kRelaxed);
}

// The in-flight bound now: the whole of it (no more than request_share_percent of the higher ones'
// shortest request when they published one) while a higher priority is busy (a floor slice), else
// in proportion to how long the most recent one has been idle, up to the whole after
// in_flight_ramp_ns, and released_bound_ns once it has been idle idle_release_ns. A higher one
// never busy (just started, loading) gets the whole bound: its first request may come any moment.
std::uint64_t PriorityGate::bound_now(std::uint64_t now) const {
  std::uint64_t bound = tuning_.in_flight_bound_ns;
  const std::uint64_t period = watch_.higher_period_ns();
  if (period != 0 && tuning_.request_share_percent != 0) {
    const std::uint64_t share = period / 100 * std::min(tuning_.request_share_percent, 100U);
    bound = std::min(bound, std::max(kMinRequestBoundNs, share));
  }
  const std::uint64_t ramp = tuning_.in_flight_ramp_ns;
  const std::uint64_t idle_since = watch_.higher_busy_until_ns();
  if (tuning_.idle_release_ns != 0 && idle_since != 0 && idle_since < now &&
      now - idle_since >= tuning_.idle_release_ns)
    return std::max(bound, tuning_.released_bound_ns);
  if (ramp == 0 || idle_since == 0 || idle_since >= now) return bound;
  const std::uint64_t idle = now - idle_since;
  if (idle >= ramp) return bound;
  return static_cast<std::uint64_t>(static_cast<unsigned __int128>(bound) * idle / ramp);
}

}  // namespace gpuslice::limiter
