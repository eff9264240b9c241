// How much of the wall time a process's launches keep the device busy, read from the device's own
// timeline. The compute limiter charges a window's wall time times this duty: a device-bound window
// (duty 1) is charged as before, a launch-bound one (tiny kernels between host work) only for the time
// its kernels ran.
//
// A probe times launches from the start of each window (any thread's, up to kSlots of them): a
// timing event recorded on the launch's stream just before the launch and one just after, so each
// pair spans exactly that launch's device time (the stream runs in order: the first completes when
// the earlier work did, i.e. when the kernel starts). With a stride of 1 it times every launch of a
// span of host time at the window's start; with a stride s (sized by the limiter so that the slots
// last the window) every s-th launch to the window's close, and the pairs' device time times the launches
// of the span over the launches timed estimates their device time: a window whose first launches
// come denser than the rest (a decode step's layers, then its sampling on the host) is not charged
// the dense part's duty over its whole length. The duty is that device time over the span: the union of
// the pairs' spans on the device's timeline (each placed by its events' offsets from the first pair's), so
// kernels of several threads' streams that run side by side count once, as GPU time does. A pair costs two
// cuEventRecord; the pairs are read once, after the window's drain, when every event has completed (two
// elapsed-time reads each). Launches outside the probe cost one relaxed load and a compare.
//
// A pair begun while its stream had nothing left to run (cuStreamQuery) starts on the device at once,
// and the launch reaches the device only once the host has made the launch call (microseconds on a
// real driver, against a decode loop's kernels of a few): that host time is taken off the pair's span.
// Without it a launch-bound loop of tiny kernels measured twice its GPU time on an H200 (the
// decode loop 22% busy by its pairs, 7-10% by NVML). A pair begun behind queued work is left whole:
// the launch was made while the earlier work ran, so its kernel starts when the first event completes.
//
// The probe's own host time (its lock, the two records: microseconds per launch on a real driver) is
// not in the span: it slows the probed launches, and a step that keeps the device busy when launched
// plainly could leave it idle between steps while probed. Without that time the span is the host
// time the same launches take unprobed, and the duty what they cause (at least; never below).
#pragma once

#include <atomic>
#include <cstdint>

#include "abi/cuda_abi.h"
#include "common/clock.h"
#include "limiter/driver_ops.h"

namespace gpuslice::limiter {

class BusyProbe {
 public:
  static constexpr unsigned kSlots = 128;
  // A probe ends at the first launch after this much host time, or when its slots are full. Launches
  // come in bursts (a step's kernels launched back to back): ending on time cuts at the start of a
  // burst, with the probed bursts' work done inside the span; ending on full slots may cut inside
  // one, whose queued work then runs past the span and is counted over it (an overestimate).
  static constexpr std::uint64_t kMaxSpanNs = 5'000'000;
  static constexpr std::uint32_t kNever = ~0U;

  struct Result {
    bool valid = false;  // false: nothing measured (charge in full)
    std::uint64_t busy_ns = 0;
    std::uint64_t span_ns = 0;  // the span's host time less the probe's own (may be <= busy_ns)
    std::uint32_t timed = 0;    // launches timed (also when nothing could be read)
  };

  BusyProbe() = default;
  BusyProbe(const BusyProbe&) = delete;
  BusyProbe& operator=(const BusyProbe&) = delete;

  // Whether the driver offers timing events at all; without them nothing is ever probed.
  static bool supported(const DriverOps& ops);

  // At a window's opening (one thread, the limiter's closer): the probe starts at the window's
  // launch number `first` and times every `stride`-th launch from there (1: every launch of a span of
  // at most kMaxSpanNs).
  void arm(std::uint32_t first, std::uint32_t stride = 1) {
    stride_.store(stride == 0 ? 1 : stride, std::memory_order_relaxed);
    next_at_.store(first, std::memory_order_relaxed);
  }

  // Launch number `n` of the window (all threads) is about to be submitted on `stream`. The fast path:
  // one relaxed load and a compare. Returns true when the caller must call after_launch() on the same
  // thread once the launch was submitted.
  bool before_launch(const DriverOps& ops, Clock& clock, CUstream stream, std::uint64_t now,
                     std::uint32_t n) {
    if (n < next_at_.load(std::memory_order_relaxed)) [[likely]]
      return false;
    return probe_launch(ops, clock, stream, now, n);
  }
  void after_launch(const DriverOps& ops, Clock& clock, CUstream stream);
  // Host time a thread spent waiting in another gate before its launch: left out of a span that is
  // running (one that starts with this launch began after the wait).
  void exclude(std::uint64_t ns);

  // After the window's drain (every event completed), by the thread closing it: what the probe
  // measured (ending at `now` and the window's `launches` if still running), and the probe is reset
  // (disarmed until the next arm()). Without `read` (a window dropped undrained) it only resets.
  Result collect(const DriverOps& ops, std::uint64_t now, bool read = true, std::uint32_t launches = 0);

 private:
  enum class Phase : std::uint32_t { Idle, Running, Ended, Invalid };
  struct Slot {
    CUevent before = nullptr;
    CUevent after = nullptr;
    bool idle = false;              // the stream had run everything when `before` was recorded
    std::uint64_t recorded_ns = 0;  // host time `before` was recorded
    std::uint64_t launch_ns = 0;    // host time from then to the launch's return (taken off if idle)
  };
  // The probed launch a thread is submitting, between before_launch() and after_launch().
  struct Pending {
    BusyProbe* probe = nullptr;
    std::uint32_t generation = 0;
    std::uint32_t slot = 0;
  };
  static thread_local Pending t_pending;

  bool probe_launch(const DriverOps& ops, Clock& clock, CUstream stream, std::uint64_t now, std::uint32_t n);
  bool union_of_pairs(const DriverOps& ops, std::uint64_t* busy_ns);
  bool create_slot(const DriverOps& ops, Slot& slot);
  void lock();
  void unlock() { lock_.store(false, std::memory_order_release); }

  // The next launch number to time (kNever: none); every stride_-th from the first.
  std::atomic<std::uint32_t> next_at_{kNever};
  std::atomic<std::uint32_t> stride_{1};
  // Guards everything below: probed launches are few, so a spin lock costs nothing that matters.
  std::atomic<bool> lock_{false};
  Phase phase_ = Phase::Idle;
  std::uint32_t generation_ = 0;  // one per probe, so a late after_launch() cannot reach a later one
  std::uint32_t claimed_ = 0;     // pairs begun ("before" recorded)
  std::uint32_t completed_ = 0;   // pairs whose "after" is recorded too
  std::uint64_t start_ns_ = 0;
  std::uint64_t end_ns_ = 0;
  std::uint64_t own_ns_ = 0;   // host time spent in the probe's pairs, every thread's
  std::uint32_t first_n_ = 0;  // the span's first launch number
  std::uint32_t end_n_ = 0;    // the launch number the span ended before (when Ended)
  Slot slots_[kSlots];
};

}  // namespace gpuslice::limiter
