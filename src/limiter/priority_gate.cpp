#include "limiter/priority_gate.h"

#include <algorithm>

#include "limiter/hold_trace.h"

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
      tuning_(effective(tuning)),
      busy_({.busy_horizon_ns = tuning_.busy_horizon_ns,
             .sync_lease_ns = tuning_.sync_lease_ns,
             .resume_grace_ns = tuning_.resume_grace_ns}),
      watch_(board, {.refresh_ns = tuning_.refresh_ns,
                     .absent_refresh_ns = tuning_.absent_refresh_ns,
                     .stale_ns = tuning_.stale_ns,
                     .max_claim_ns = tuning_.sync_lease_ns + tuning_.busy_horizon_ns,
                     .light_share_permille = tuning_.light_share_permille}),
      floor_(tuning_.floor_percent, tuning_.floor_window_ns, tuning_.floor_slice_ns),
      share_({.every_ns = tuning_.share_every_ns, .ttl_ns = tuning_.share_ttl_ns}),
      bound_(clock, ops,
             {.whole_ns = tuning_.in_flight_bound_ns,
              .initial_launch_cap = tuning_.initial_launch_cap,
              .per_kernel_cost = tuning_.per_kernel_cost,
              .long_kernels_alone = tuning_.long_kernels_alone}) {
  share_supported_ = DeviceShare::supported(ops_);
}

PriorityTuning PriorityGate::effective(const PriorityTuning& tuning) {
  const PriorityTuning defaults;
  PriorityTuning t = tuning;
  if (t.in_flight_bound_ns == 0) t.in_flight_bound_ns = defaults.in_flight_bound_ns;
  if (t.refresh_ns == 0) t.refresh_ns = defaults.refresh_ns;
  t.absent_refresh_ns = std::max(t.absent_refresh_ns, t.refresh_ns);
  if (t.held_poll_ns == 0 || t.held_poll_ns > t.refresh_ns) t.held_poll_ns = t.refresh_ns;
  if (t.busy_horizon_ns == 0) t.busy_horizon_ns = defaults.busy_horizon_ns;
  if (t.sync_lease_ns == 0) t.sync_lease_ns = defaults.sync_lease_ns;
  if (t.stale_ns == 0) t.stale_ns = defaults.stale_ns;
  t.floor_percent = std::min(t.floor_percent, 100U);
  if (t.floor_window_ns == 0) t.floor_window_ns = defaults.floor_window_ns;
  if (t.floor_slice_ns == 0) t.floor_slice_ns = defaults.floor_slice_ns;
  if (t.initial_launch_cap == 0) t.initial_launch_cap = defaults.initial_launch_cap;
  if (t.share_every_ns == 0) t.share_every_ns = defaults.share_every_ns;
  if (t.share_ttl_ns == 0) t.share_ttl_ns = defaults.share_ttl_ns;
  return t;
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
  busy_.note_launch_begins(now);
  announce_busy(now);
  if (priority() == Priority::High || !tuning_.holds) {
    // Nobody above (or the MPS server ranks us): nothing to read or bound. The launch still counts
    // for note_host_sync: a sync that returns after another thread launched must not say idle.
    busy_.note_launched(now);
    return 0;
  }
  PeerWatch::Summary summary = watch_.look(now, false, priority());
  if (!summary.higher_present) {
    // Nobody above us: no bound and no bookkeeping.
    bound_.forget_window();
    busy_.note_launched(now);
    return 0;
  }
  const auto bound_at = [this](std::uint64_t t) { return bound_now(t); };
  const std::uint64_t hold_start = now;
  bool held = false;
  HoldTrace trace(bound_);
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
        trace.begin(stream, now, bound_at);
      }
      held_now = true;
      clock_.sleep_ns(
          std::max(kMinNapNs, std::min(tuning_.held_poll_ns, summary.higher_busy_until_ns - now)));
      now = clock_.now_ns();
      trace.poll(now);
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
    trace.end(now, hold_start);
    held_back_ns_.fetch_add(held_ns, kRelaxed);
    // Time spent held is time the container was busy: keep its own record busy across it.
    announce_busy(now);
  } else {
    floor_.admits(now, now, false);
  }
  bound_.count_launch(stream, now, kernel);
  busy_.note_launched(now);
  return held || waited ? elapsed(entered, now) : 0;
}

// Low has nobody below it to tell it is busy.
void PriorityGate::announce_busy(std::uint64_t now) {
  if (priority() != Priority::Low && busy_.note_busy(now)) publish_own(now);
}

void PriorityGate::note_sync_begin() {
  const std::uint64_t now = clock_.now_ns();
  if (busy_.note_sync_begin(now, priority() != Priority::Low)) publish_own(now);
}

void PriorityGate::note_host_sync() {
  const std::uint64_t now = clock_.now_ns();
  // The queue was empty when the sync returned: the in-flight window starts over.
  bound_.note_host_sync();
  // Idle at once (or after the grace) when nothing was launched since the wait began, so lower
  // priorities resume without waiting for the horizon to pass.
  if (!busy_.idle_since_sync_began()) return;
  const bool announces = priority() != Priority::Low;
  // Every event recorded before the wait has completed: the share's span, if one ran, is read.
  const bool share_moved = share_supported_ && announces && share_.note_idle(ops_, now);
  const bool record_moved = busy_.note_sync_return(now, announces);
  if (share_moved || record_moved) publish_own(now);
}

void PriorityGate::heartbeat() {
  const std::uint64_t now = clock_.now_ns();
  // A measured share is re-measured once it is old: the record then says "not measured".
  if (share_supported_ && priority() != Priority::Low) share_.tick(now);
  publish_own(now);
}

void PriorityGate::settle() {
  busy_.settle();
  publish_own(clock_.now_ns());
}

void PriorityGate::publish_own(std::uint64_t now) {
  if (board_ == nullptr) return;
  PeerView own;
  own.priority = priority();
  own.heartbeat_ns = now;
  own.busy_until_ns = busy_.until_ns();  // past: idle since then
  own.held_back_ns = held_back_ns_.load(kRelaxed);
  own.device_share_permille = share_.permille();
  own.busy_period_ns = busy_.period_ns();
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
