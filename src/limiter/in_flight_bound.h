// One policy of the priority gate (priority_gate.h): the in-flight bound. While a higher-priority
// container is alive, a lower one keeps no more than about the bound of device work queued
// (launched work cannot be recalled, and a higher one's request time-slices with all of it). The
// gate says what the bound is now (bound_now: it ramps up with the higher ones' idle time); this
// class counts the launches in windows and closes a window when it is full, by the predicted device
// time of its launches (KernelCosts) or by a count sized by the average launch (LaunchCost), with a
// step: a drain, or when pipelined an event after the window and a wait for the previous window's
// only. The steps' measured windows teach both costs. Counting is relaxed atomics only; one thread
// steps at a time, the others wait for it.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "abi/cuda_abi.h"
#include "common/clock.h"
#include "limiter/driver_ops.h"
#include "limiter/kernel_cost.h"
#include "limiter/launch_cost.h"

namespace gpuslice::limiter {

// The bound at a time, in ns of device time (the gate's bound_now): asked only when a window may
// close, again after each wait for another thread's step.
template <class F>
concept BoundAt = std::is_invocable_r_v<std::uint64_t, const F&, std::uint64_t>;

class InFlightBound {
 public:
  struct Settings {
    // The whole bound (PriorityTuning::in_flight_bound_ns), not the ramped one: what a long kernel
    // is measured against.
    std::uint64_t whole_ns = 0;
    std::uint32_t initial_launch_cap = 0;  // launches allowed before the first drain
    bool per_kernel_cost = true;           // PriorityTuning::per_kernel_cost
    bool long_kernels_alone = false;       // PriorityTuning::long_kernels_alone
  };

  InFlightBound(Clock& clock, const DriverOps& ops, const Settings& settings)
      : clock_(clock), ops_(ops), settings_(settings) {}
  InFlightBound(const InFlightBound&) = delete;
  InFlightBound& operator=(const InFlightBound&) = delete;

  // Keeps about bound_at(now) of device time queued: a step when the window is full (window_full), a
  // drain, or when pipelined an event after the window and a wait for the previous window's only.
  // True when this thread stepped (it waited for the device).
  template <BoundAt F>
  bool step_if_due(CUstream stream, std::uint64_t now, std::uint64_t kernel, const F& bound_at);
  // Counts the launch about to go in the window, and which stream and thread the window's launches
  // use: a pipelined step needs them all on the stream (and thread, for the per-thread default
  // stream) of the launch that closes the window.
  void count_launch(CUstream stream, std::uint64_t now, std::uint64_t kernel);
  // Nobody above: a window left from an earlier higher peer is forgotten so that a new one starts
  // counting from its first launch.
  void forget_window() {
    if (window_launches_.load(std::memory_order_relaxed) != 0) reset_window();
  }
  // A hold begins: the window's device time will include the higher priority's.
  void note_hold() { window_held_.store(true, std::memory_order_relaxed); }
  // An application's host synchronisation returned: the queue was empty then.
  void note_host_sync();

  // Debug diagnostics, when a hold begins: records an event behind the queue on `stream`, for the
  // held thread to poll (queue_probe_done) until end_queue_probe. False when no probe was started
  // (then nothing is recorded).
  bool start_queue_probe(CUstream stream);
  bool queue_probe_done() const { return ops_.event_query(probe_event_) == CUDA_SUCCESS; }
  void end_queue_probe() { probe_busy_.store(false, std::memory_order_release); }

  // What the window holds, for the gate's debug line at a hold: its launches, their predicted
  // device time, the launch cap of a count and the average launch.
  std::uint32_t window_launches() const { return window_launches_.load(std::memory_order_relaxed); }
  std::uint64_t window_predicted_ns() const { return window_predicted_ns_.load(std::memory_order_relaxed); }
  template <BoundAt F>
  std::uint64_t launch_cap(std::uint64_t now, const F& bound_at) const;
  std::uint64_t per_launch_ns() const { return launch_cost_.per_launch_ns(); }

  std::uint64_t drains() const { return drains_.load(std::memory_order_relaxed); }
  std::uint64_t event_waits() const { return event_waits_.load(std::memory_order_relaxed); }
  std::uint64_t long_kernels() const { return long_kernels_.load(std::memory_order_relaxed); }
  std::uint64_t kernels_costed() const { return kernel_costs_.known(); }

 private:
  // How often a thread waiting for another thread's drain looks again.
  static constexpr std::uint64_t kDrainPollNs = 100'000;
  // Upper bound of the launch cap, so a tiny measured cost cannot make the bound meaningless.
  static constexpr std::uint64_t kMaxLaunchCap = 4096;

  template <BoundAt F>
  bool window_full(std::uint64_t now, std::uint64_t kernel, const F& bound_at) const;
  bool long_kernel(std::uint64_t kernel) const;
  void reset_window();
  void step(CUstream stream, bool alone);
  bool pipelined_step(CUstream stream, std::uint32_t launches, bool held, bool alone);
  bool events_usable();
  void forget_ring();
  void drain(std::uint32_t launches, std::uint64_t start, bool held, int slot);
  void learn_window(std::uint64_t ns, std::uint32_t launches, int slot);
  bool pipelining() const {
    return ops_.ctx_id != nullptr && ops_.event_create != nullptr && ops_.event_record != nullptr &&
           ops_.event_synchronize != nullptr && ops_.event_elapsed_ns != nullptr &&
           !events_off_.load(std::memory_order_relaxed);
  }

  Clock& clock_;
  DriverOps ops_;
  Settings settings_;

  // Launches since the last step (a drain, or an event recorded), whether they all went to one
  // stream (from one thread, for the per-thread default stream), and the cost of a launch (measured
  // over steps' windows).
  std::atomic<std::uint32_t> window_launches_{0};
  std::atomic<std::uint64_t> window_start_ns_{0};
  std::atomic<bool> window_held_{false};
  std::atomic<CUstream> window_stream_{nullptr};
  std::atomic<const void*> window_thread_{nullptr};
  std::atomic<bool> window_mixed_{false};
  std::atomic<bool> draining_{false};  // one thread steps at a time
  LaunchCost launch_cost_;
  // Costs per kernel (PriorityTuning::per_kernel_cost): the window's predicted device time and its
  // launches' keys (the first kWindowKeys; a window closes when they are full), learnt from when
  // the window's device time is measured.
  static constexpr std::uint32_t kWindowKeys = 512;
  std::atomic<std::uint64_t> window_predicted_ns_{0};
  std::array<std::atomic<std::uint64_t>, kWindowKeys> window_keys_{};
  KernelCosts kernel_costs_;

  // Pipelined bound (when the driver ops have events): when a window closes (half the bound of
  // predicted device time, or half the launch cap), the stepping thread records an event after it
  // and waits for the previous window's event only, so the queue never runs dry at a step while at
  // most the bound stays in flight. The ring and its fields belong to the thread holding draining_.
  static constexpr int kRing = 3;
  CUevent ring_[kRing] = {};
  bool ring_pending_[kRing] = {};
  bool ring_held_[kRing] = {};
  std::uint32_t ring_launches_[kRing] = {};
  std::uint64_t ring_keys_[kRing][kWindowKeys] = {};  // each window's keys, to learn from
  std::uint32_t ring_key_count_[kRing] = {};          // 0: not learnt from (keys incomplete)
  std::uint64_t learn_scratch_[kWindowKeys] = {};
  int ring_next_ = 0;
  std::uint64_t events_ctx_id_ = 0;
  bool events_created_ = false;
  std::atomic<bool> events_off_{false};  // creating or using them failed: drains only
  // Diagnostics (debug logging only): an event recorded behind this container's queue when a hold
  // begins, polled by the held thread, tells how long the work queued before the hold took to run
  // (the in-flight bound as the higher priority met it). Belongs to the thread that recorded it.
  CUevent probe_event_ = nullptr;
  std::atomic<bool> probe_busy_{false};
  std::atomic<bool> ring_stale_{false};  // an application sync emptied the queue meanwhile

  std::atomic<std::uint64_t> drains_{0};
  std::atomic<std::uint64_t> event_waits_{0};
  std::atomic<std::uint64_t> long_kernels_{0};
};

template <BoundAt F>
bool InFlightBound::step_if_due(CUstream stream, std::uint64_t now, std::uint64_t kernel, const F& bound_at) {
  for (;;) {
    if (draining_.load(std::memory_order_acquire)) {
      clock_.sleep_ns(kDrainPollNs);
      now = clock_.now_ns();
      continue;
    }
    if (!window_full(now, kernel, bound_at)) return false;
    if (draining_.exchange(true, std::memory_order_acquire)) continue;
    step(stream, long_kernel(kernel));
    draining_.store(false, std::memory_order_release);
    return true;
  }
}

// Whether the window closes before this launch of `kernel`. With costs per kernel (once the average
// is known): when its launches' predicted device time and this one's would pass its share of the
// bound (half of it when pipelined: at most two windows are queued), or its keys are full. Else
// when it holds its share of the launch cap.
template <BoundAt F>
bool InFlightBound::window_full(std::uint64_t now, std::uint64_t kernel, const F& bound_at) const {
  const std::uint32_t launches = window_launches_.load(std::memory_order_relaxed);
  if (launches == 0) return false;
  const std::uint64_t average = launch_cost_.per_launch_ns();
  if (settings_.per_kernel_cost && average != 0) {
    if (launches >= kWindowKeys) return true;
    const std::uint64_t share = pipelining() ? bound_at(now) / 2 : bound_at(now);
    return window_predicted_ns_.load(std::memory_order_relaxed) + kernel_costs_.predict(kernel, average) >
           share;
  }
  const std::uint64_t cap = launch_cap(now, bound_at);
  const std::uint64_t step_at = pipelining() ? std::max<std::uint64_t>(1, cap / 2) : cap;
  return launches >= step_at;
}

template <BoundAt F>
std::uint64_t InFlightBound::launch_cap(std::uint64_t now, const F& bound_at) const {
  const std::uint64_t cost = launch_cost_.per_launch_ns();
  if (cost == 0) return settings_.initial_launch_cap;
  return std::clamp<std::uint64_t>(bound_at(now) / cost, 1, kMaxLaunchCap);
}

}  // namespace gpuslice::limiter
