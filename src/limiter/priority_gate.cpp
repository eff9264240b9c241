#include "limiter/priority_gate.h"

#include <algorithm>

#include "common/log.h"

namespace gpuslice::limiter {
namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;
constexpr auto kAcquire = std::memory_order_acquire;
constexpr auto kRelease = std::memory_order_release;

// Shortest hold sleep: below this a sleep costs more than it is worth.
constexpr std::uint64_t kMinNapNs = 20'000;
// How often a thread waiting for another thread's drain looks again.
constexpr std::uint64_t kDrainPollNs = 100'000;
// Upper bound of the launch cap, so a tiny measured cost cannot make the bound meaningless.
constexpr std::uint64_t kMaxLaunchCap = 4096;

std::uint64_t elapsed(std::uint64_t from, std::uint64_t to) { return to > from ? to - from : 0; }

std::atomic<bool> g_drain_error_logged{false};

// Its address tells the launching threads apart (a window on the per-thread default stream must
// come from one thread).
thread_local char t_thread_marker = 0;

// The one stream handle that names a different stream in each thread. Any other handle (an
// explicit stream, the legacy stream) is one queue whichever thread launches on it, so an event
// recorded on it after a window covers the launches of every thread in that window.
bool is_per_thread(CUstream stream) { return stream == CU_STREAM_PER_THREAD; }

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
      share_(tuning.share_every_ns != 0 ? tuning.share_every_ns : PriorityTuning{}.share_every_ns) {
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
  if (tuning_.initial_launch_cap == 0) tuning_.initial_launch_cap = defaults.initial_launch_cap;
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

Priority PriorityGate::priority() const {
  const std::uint32_t raw = priority_source_ != nullptr ? priority_source_->load(kRelaxed) : kNoPriority;
  const Priority claimed = priority_from_value(raw).value_or(Priority::Normal);
  if (ceiling_source_ == nullptr) return claimed;
  return lower_priority(claimed,
                        priority_from_value(ceiling_source_->load(kRelaxed)).value_or(Priority::Normal));
}

PriorityStats PriorityGate::stats() const {
  PriorityStats s;
  s.held_back_ns = held_back_ns_.load(kRelaxed);
  s.holds = holds_.load(kRelaxed);
  s.drains = drains_.load(kRelaxed);
  s.event_waits = event_waits_.load(kRelaxed);
  s.floor_slices = floor_.slices();
  s.publishes = publishes_.load(kRelaxed);
  s.scans = watch_.scans();
  s.rereads = watch_.rereads();
  s.kernels_costed = kernel_costs_.known();
  s.long_kernels = long_kernels_.load(kRelaxed);
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
    // Nobody above us: no bound and no bookkeeping. A window left from an earlier higher peer is
    // forgotten so that a new one starts counting from its first launch.
    if (window_launches_.load(kRelaxed) != 0) reset_window();
    last_launch_ns_.store(now, kRelaxed);
    return 0;
  }
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
        window_held_.store(true, kRelaxed);
        // With the release below, lets a benchmark tell whether a higher priority's slow request
        // had this container held, and how much it had queued then (the window, its predicted
        // device time, the launch cap of a count and the average launch).
        GS_LOG(Debug,
               "priority gate: held at %llu us, %u launches in the window (%llu us predicted), cap %llu, "
               "%llu ns "
               "a launch",
               static_cast<unsigned long long>(now / 1000), window_launches_.load(kRelaxed),
               static_cast<unsigned long long>(window_predicted_ns_.load(kRelaxed) / 1000),
               static_cast<unsigned long long>(launch_cap(now)),
               static_cast<unsigned long long>(launch_cost_.per_launch_ns()));
        probing = log::enabled(log::Level::Debug) && start_queue_probe(stream);
      }
      held_now = true;
      clock_.sleep_ns(
          std::max(kMinNapNs, std::min(tuning_.held_poll_ns, summary.higher_busy_until_ns - now)));
      now = clock_.now_ns();
      if (probing && queue_done_ns == 0 && ops_.event_query(probe_event_) == CUDA_SUCCESS)
        queue_done_ns = now;
      summary = watch_.look(now, true, priority());
    }
    if (held_now) held_ns += elapsed(round_start, now);
    if (!step_if_due(stream, now, kernel)) break;
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
      probe_busy_.store(false, kRelease);
    } else {
      GS_LOG(Debug, "priority gate: released at %llu us", static_cast<unsigned long long>(now / 1000));
    }
    held_back_ns_.fetch_add(held_ns, kRelaxed);
    // Time spent held is time the container was busy: keep its own record busy across it.
    announce_busy(now);
  } else {
    floor_.admits(now, now, false);
  }
  count_launch(stream, now, kernel);
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
  if (!draining_.load(kAcquire)) {
    reset_window();
    window_held_.store(false, kRelaxed);
    ring_stale_.store(true, kRelaxed);  // the ring's next wait and sample would span the sync
  }
  // Idle at once (or after the grace) when nothing was launched since the wait began, so lower
  // priorities resume without waiting for the horizon to pass.
  if (last_launch_ns_.load(kRelaxed) > sync_begin_ns_.load(kRelaxed)) return;
  // Every event recorded before the wait has completed: the share's span, if one ran, is read.
  const bool share_moved = share_supported_ && priority() != Priority::Low &&
                           share_.note_idle(ops_, now, tuning_.light_share_permille);
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

void PriorityGate::heartbeat() { publish_own(clock_.now_ns()); }

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
// shortest request when they published one) while a higher priority is busy (a floor slice) or has
// never been busy, else in proportion to how long the most recent one has been idle, up to the
// whole after in_flight_ramp_ns.
std::uint64_t PriorityGate::bound_now(std::uint64_t now) const {
  std::uint64_t bound = tuning_.in_flight_bound_ns;
  const std::uint64_t period = watch_.higher_period_ns();
  if (period != 0 && tuning_.request_share_percent != 0) {
    const std::uint64_t share = period / 100 * std::min(tuning_.request_share_percent, 100U);
    bound = std::min(bound, std::max(kMinRequestBoundNs, share));
  }
  const std::uint64_t ramp = tuning_.in_flight_ramp_ns;
  const std::uint64_t idle_since = watch_.higher_busy_until_ns();
  if (ramp == 0 || idle_since == 0 || idle_since >= now) return bound;
  const std::uint64_t idle = now - idle_since;
  if (idle >= ramp) return bound;
  return static_cast<std::uint64_t>(static_cast<unsigned __int128>(bound) * idle / ramp);
}

std::uint64_t PriorityGate::launch_cap(std::uint64_t now) const {
  const std::uint64_t cost = launch_cost_.per_launch_ns();
  if (cost == 0) return tuning_.initial_launch_cap;
  return std::clamp<std::uint64_t>(bound_now(now) / cost, 1, kMaxLaunchCap);
}

bool PriorityGate::pipelining() const {
  return ops_.ctx_id != nullptr && ops_.event_create != nullptr && ops_.event_record != nullptr &&
         ops_.event_synchronize != nullptr && ops_.event_elapsed_ns != nullptr && !events_off_.load(kRelaxed);
}

// Keeps about bound_now() of device time queued: a step when the window is full (window_full), a
// drain, or when pipelined an event after the window and a wait for the previous window's only.
// True when this thread stepped (it waited for the device).
bool PriorityGate::step_if_due(CUstream stream, std::uint64_t now, std::uint64_t kernel) {
  for (;;) {
    if (draining_.load(kAcquire)) {
      clock_.sleep_ns(kDrainPollNs);
      now = clock_.now_ns();
      continue;
    }
    if (!window_full(now, kernel)) return false;
    if (draining_.exchange(true, kAcquire)) continue;
    step(stream, long_kernel(kernel));
    draining_.store(false, kRelease);
    return true;
  }
}

// Whether the window closes before this launch of `kernel`. With costs per kernel (once the average
// is known): when its launches' predicted device time and this one's would pass its share of the
// bound (half of it when pipelined: at most two windows are queued), or its keys are full. Else
// when it holds its share of the launch cap.
bool PriorityGate::window_full(std::uint64_t now, std::uint64_t kernel) const {
  const std::uint32_t launches = window_launches_.load(kRelaxed);
  if (launches == 0) return false;
  const std::uint64_t average = launch_cost_.per_launch_ns();
  if (tuning_.per_kernel_cost && average != 0) {
    if (launches >= kWindowKeys) return true;
    const std::uint64_t share = pipelining() ? bound_now(now) / 2 : bound_now(now);
    return window_predicted_ns_.load(kRelaxed) + kernel_costs_.predict(kernel, average) > share;
  }
  const std::uint64_t cap = launch_cap(now);
  const std::uint64_t step_at = pipelining() ? std::max<std::uint64_t>(1, cap / 2) : cap;
  return launches >= step_at;
}

// Whether `kernel` is to go alone (PriorityTuning::long_kernels_alone): predicted longer than half
// the whole bound, not of the ramped one (during the ramp every kernel would then wait for an empty
// queue). Only with costs per kernel: the average launch tells no kernel from another.
bool PriorityGate::long_kernel(std::uint64_t kernel) const {
  if (!tuning_.long_kernels_alone || !tuning_.per_kernel_cost) return false;
  const std::uint64_t average = launch_cost_.per_launch_ns();
  return average != 0 && kernel_costs_.predict(kernel, average) > tuning_.in_flight_bound_ns / 2;
}

void PriorityGate::reset_window() {
  window_launches_.store(0, kRelaxed);
  window_predicted_ns_.store(0, kRelaxed);
}

// Debug diagnostics, when a hold begins: records probe_event_ behind the queue on `stream`, for the
// held thread to poll. One probe at a time; the step's lock (draining_) guards the events (created
// in the ring's context). False when no probe was started (then nothing is recorded).
bool PriorityGate::start_queue_probe(CUstream stream) {
  if (ops_.event_query == nullptr || !pipelining()) return false;
  if (probe_busy_.exchange(true, kAcquire)) return false;
  bool recorded = false;
  if (!draining_.exchange(true, kAcquire)) {
    if (!stream_capturing(ops_, stream) && events_usable()) {
      if (probe_event_ == nullptr && ops_.event_create(&probe_event_) != CUDA_SUCCESS) probe_event_ = nullptr;
      recorded = probe_event_ != nullptr && ops_.event_record(probe_event_, stream) == CUDA_SUCCESS;
    }
    draining_.store(false, kRelease);
  }
  if (!recorded) probe_busy_.store(false, kRelease);
  return recorded;
}

// Counts the launch about to go in the window, and which stream and thread the window's launches
// use: a pipelined step needs them all on the stream (and thread, for the per-thread default
// stream) of the launch that closes the window.
void PriorityGate::count_launch(CUstream stream, std::uint64_t now, std::uint64_t kernel) {
  const std::uint32_t index = window_launches_.fetch_add(1, kRelaxed);
  if (tuning_.per_kernel_cost) {
    if (index < kWindowKeys) window_keys_[index].store(kernel, kRelaxed);
    window_predicted_ns_.fetch_add(kernel_costs_.predict(kernel, launch_cost_.per_launch_ns()), kRelaxed);
  }
  if (index == 0) {
    window_start_ns_.store(now, kRelaxed);
    window_stream_.store(stream, kRelaxed);
    window_thread_.store(&t_thread_marker, kRelaxed);
    window_mixed_.store(false, kRelaxed);
  } else if (window_stream_.load(kRelaxed) != stream ||
             (is_per_thread(stream) && window_thread_.load(kRelaxed) != &t_thread_marker)) {
    window_mixed_.store(true, kRelaxed);
  }
}

// One step of the bound, by the thread holding draining_, before its launch on `stream`; `alone`:
// that launch is a long kernel, to go on an empty queue.
void PriorityGate::step(CUstream stream, bool alone) {
  const std::uint32_t launches = window_launches_.load(kRelaxed);
  const std::uint64_t start = window_start_ns_.load(kRelaxed);
  const bool held = window_held_.load(kRelaxed);
  const bool single = !window_mixed_.load(kRelaxed) && window_stream_.load(kRelaxed) == stream &&
                      (!is_per_thread(stream) || window_thread_.load(kRelaxed) == &t_thread_marker);
  // The window's keys go with it (to the ring slot its event takes), to learn from once its device
  // time is known; a window longer than its recorded keys is not learnt from.
  const int slot = ring_next_;
  ring_key_count_[slot] = 0;
  if (tuning_.per_kernel_cost && launches <= kWindowKeys) {
    for (std::uint32_t i = 0; i < launches; ++i) ring_keys_[slot][i] = window_keys_[i].load(kRelaxed);
    ring_key_count_[slot] = launches;
  }
  reset_window();
  window_held_.store(false, kRelaxed);
  if (stream_capturing(ops_, stream)) {
    return;  // captured launches run nothing yet; a synchronize or an event would change the capture
  }
  if (pipelining() && single && pipelined_step(stream, launches, held, alone)) return;
  forget_ring();  // its events are behind this drain
  drain(launches, start, held, slot);
}

// None of the ring's events is waited for or sampled again: the queue was emptied since they were
// recorded (a drain, or an application's synchronisation).
void PriorityGate::forget_ring() {
  for (bool& pending : ring_pending_) pending = false;
}

// Events are created once, in the context current at the first step; they are used only while that
// context (by its unique id, so not a later one at the same address) is current.
bool PriorityGate::events_usable() {
  std::uint64_t id = 0;
  if (ops_.ctx_id(&id) != CUDA_SUCCESS || id == 0) return false;
  if (!events_created_) {
    for (CUevent& event : ring_) {
      if (ops_.event_create(&event) != CUDA_SUCCESS) {
        events_off_.store(true, kRelaxed);  // the ones created stay: a handful of bytes, once
        return false;
      }
    }
    events_created_ = true;
    events_ctx_id_ = id;
  }
  return id == events_ctx_id_;
}

// Records an event after the window just closed on `stream`, then waits for the previous window's
// event: what stays queued is this window and the launches until the next step, at most the cap.
// With `alone` it waits for this window's event too: the queue is then empty. The previous
// window's device time (between the completions of its event and the one before it) is a sample of
// the launch cost. False when events cannot be used here (the caller drains).
bool PriorityGate::pipelined_step(CUstream stream, std::uint32_t launches, bool held, bool alone) {
  if (!events_usable()) return false;
  if (ring_stale_.exchange(false, kRelaxed)) forget_ring();
  const int cur = ring_next_;
  const int prev = (cur + kRing - 1) % kRing;
  const int before = (cur + kRing - 2) % kRing;
  if (ops_.event_record(ring_[cur], stream) != CUDA_SUCCESS) {
    events_off_.store(true, kRelaxed);
    return false;
  }
  ring_pending_[cur] = true;
  ring_launches_[cur] = launches;
  ring_held_[cur] = held;
  ring_next_ = (cur + 1) % kRing;
  if (ring_pending_[prev]) {
    if (ops_.event_synchronize(ring_[prev]) != CUDA_SUCCESS) {
      events_off_.store(true, kRelaxed);
      return false;
    }
    event_waits_.fetch_add(1, kRelaxed);
    std::uint64_t ns = 0;
    // A window interrupted by a hold measured the higher priority's time, not the cost of a launch.
    if (ring_pending_[before] && !ring_held_[prev] && ring_launches_[prev] != 0 &&
        ops_.event_elapsed_ns(ring_[before], ring_[prev], &ns) == CUDA_SUCCESS && ns != 0) {
      learn_window(ns, ring_launches_[prev], prev);
    }
    ring_pending_[before] = false;
  }
  if (!alone) return true;
  // The windows before this one are done (waited for above, or at earlier steps); this one may be
  // on another stream than they were, so it is waited for by its own event. It stays pending: the
  // next step learns from it.
  if (ops_.event_synchronize(ring_[cur]) != CUDA_SUCCESS) {
    events_off_.store(true, kRelaxed);
    return false;
  }
  event_waits_.fetch_add(1, kRelaxed);
  long_kernels_.fetch_add(1, kRelaxed);
  return true;
}

void PriorityGate::drain(std::uint32_t launches, std::uint64_t start, bool held, int slot) {
  if (ops_.ctx_synchronize == nullptr) return;
  const CUresult r = ops_.ctx_synchronize();
  drains_.fetch_add(1, kRelaxed);
  if (r != CUDA_SUCCESS) {
    if (!g_drain_error_logged.exchange(true, kRelaxed))
      GS_LOG(Debug, "priority gate: drain returned %d; the in-flight bound is estimated",
             static_cast<int>(r));
    return;
  }
  // A window interrupted by a hold measured the higher priority's time, not the cost of a launch.
  const std::uint64_t end = clock_.now_ns();
  if (held || launches == 0 || end <= start) return;
  // The first sample may include a deep queue launched before any higher priority appeared; the
  // second replaces it (LaunchCost).
  learn_window(end - start, launches, slot);
}

// A window of `launches` took `ns` of device time: a sample of the average launch, and (its keys
// in ring slot `slot`) of its kernels' costs.
void PriorityGate::learn_window(std::uint64_t ns, std::uint32_t launches, int slot) {
  launch_cost_.add(ns, launches);
  kernel_costs_.learn(ring_keys_[slot], ring_key_count_[slot], ns, launch_cost_.per_launch_ns(),
                      learn_scratch_);
}

}  // namespace gpuslice::limiter
