#include "limiter/in_flight_bound.h"

#include "common/log.h"

namespace gpuslice::limiter {
namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;
constexpr auto kAcquire = std::memory_order_acquire;
constexpr auto kRelease = std::memory_order_release;

std::atomic<bool> g_drain_error_logged{false};

// Its address tells the launching threads apart (a window on the per-thread default stream must
// come from one thread).
thread_local char t_thread_marker = 0;

// The one stream handle that names a different stream in each thread. Any other handle (an
// explicit stream, the legacy stream) is one queue whichever thread launches on it, so an event
// recorded on it after a window covers the launches of every thread in that window.
bool is_per_thread(CUstream stream) { return stream == CU_STREAM_PER_THREAD; }

}  // namespace

void InFlightBound::note_host_sync() {
  if (!draining_.load(kAcquire)) {
    reset_window();
    window_held_.store(false, kRelaxed);
    ring_stale_.store(true, kRelaxed);  // the ring's next wait and sample would span the sync
  }
}

// Whether `kernel` is to go alone (PriorityTuning::long_kernels_alone): predicted longer than half
// the whole bound, not of the ramped one (during the ramp every kernel would then wait for an empty
// queue). Only with costs per kernel: the average launch tells no kernel from another.
bool InFlightBound::long_kernel(std::uint64_t kernel) const {
  if (!settings_.long_kernels_alone || !settings_.per_kernel_cost) return false;
  const std::uint64_t average = launch_cost_.per_launch_ns();
  return average != 0 && kernel_costs_.predict(kernel, average) > settings_.whole_ns / 2;
}

void InFlightBound::reset_window() {
  window_launches_.store(0, kRelaxed);
  window_predicted_ns_.store(0, kRelaxed);
}

// One probe at a time; the step's lock (draining_) guards the events (created in the ring's
// context).
bool InFlightBound::start_queue_probe(CUstream stream) {
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

void InFlightBound::count_launch(CUstream stream, std::uint64_t now, std::uint64_t kernel) {
  const std::uint32_t index = window_launches_.fetch_add(1, kRelaxed);
  if (settings_.per_kernel_cost) {
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
void InFlightBound::step(CUstream stream, bool alone) {
  const std::uint32_t launches = window_launches_.load(kRelaxed);
  const std::uint64_t start = window_start_ns_.load(kRelaxed);
  const bool held = window_held_.load(kRelaxed);
  const bool single = !window_mixed_.load(kRelaxed) && window_stream_.load(kRelaxed) == stream &&
                      (!is_per_thread(stream) || window_thread_.load(kRelaxed) == &t_thread_marker);
  // The window's keys go with it (to the ring slot its event takes), to learn from once its device
  // time is known; a window longer than its recorded keys is not learnt from.
  const int slot = ring_next_;
  ring_key_count_[slot] = 0;
  if (settings_.per_kernel_cost && launches <= kWindowKeys) {
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
void InFlightBound::forget_ring() {
  for (bool& pending : ring_pending_) pending = false;
}

// Events are created once, in the context current at the first step; they are used only while that
// context (by its unique id, so not a later one at the same address) is current.
bool InFlightBound::events_usable() {
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
bool InFlightBound::pipelined_step(CUstream stream, std::uint32_t launches, bool held, bool alone) {
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

void InFlightBound::drain(std::uint32_t launches, std::uint64_t start, bool held, int slot) {
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
void InFlightBound::learn_window(std::uint64_t ns, std::uint32_t launches, int slot) {
  launch_cost_.add(ns, launches);
  kernel_costs_.learn(ring_keys_[slot], ring_key_count_[slot], ns, launch_cost_.per_launch_ns(),
                      learn_scratch_);
}

}  // namespace gpuslice::limiter
