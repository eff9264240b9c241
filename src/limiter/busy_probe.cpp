#include "limiter/busy_probe.h"

#include <algorithm>

namespace gpuslice::limiter {
thread_local BusyProbe::Pending BusyProbe::t_pending;

bool BusyProbe::supported(const DriverOps& ops) {
  return ops.event_create != nullptr && ops.event_record != nullptr && ops.event_elapsed_ns != nullptr;
}

void BusyProbe::lock() {
  bool expected = false;
  while (!lock_.compare_exchange_weak(expected, true, std::memory_order_acquire)) expected = false;
}

bool BusyProbe::create_slot(const DriverOps& ops, Slot& slot) {
  if (slot.before == nullptr && ops.event_create(&slot.before) != CUDA_SUCCESS) slot.before = nullptr;
  if (slot.after == nullptr && ops.event_create(&slot.after) != CUDA_SUCCESS) slot.after = nullptr;
  return slot.before != nullptr && slot.after != nullptr;
}

bool BusyProbe::probe_launch(const DriverOps& ops, Clock& clock, CUstream stream, std::uint64_t now,
                             std::uint32_t n) {
  const std::uint64_t entered = clock.now_ns();
  lock();
  const std::uint32_t stride = stride_.load(std::memory_order_relaxed);
  bool probed = false;
  bool armed = false;  // still to time later launches
  switch (phase_) {
    case Phase::Idle:
      if (n < next_at_.load(std::memory_order_relaxed)) break;  // disarmed meanwhile
      phase_ = Phase::Running;
      ++generation_;
      claimed_ = 0;
      completed_ = 0;
      own_ns_ = 0;
      start_ns_ = now;
      first_n_ = n;
      probed = true;
      break;
    case Phase::Running:
      // The span ends at the first launch it has no room or time for: every launch before it, of
      // any thread, was timed (or every stride-th one).
      if (claimed_ >= kSlots || (stride == 1 && now - start_ns_ >= kMaxSpanNs)) {
        phase_ = Phase::Ended;
        end_ns_ = now;
        end_n_ = n;
        break;
      }
      // Another thread took the launch number this one was let in for.
      if (n < next_at_.load(std::memory_order_relaxed)) {
        armed = true;
        break;
      }
      probed = true;
      break;
    case Phase::Ended:
    case Phase::Invalid:
      break;
  }
  if (probed) {
    Slot& slot = slots_[claimed_];
    // Work captured into a graph runs later, and an event there would join the capture.
    const bool capturing = stream_capturing(ops, stream);
    slot.idle = !capturing && ops.stream_query != nullptr && ops.stream_query(stream) == CUDA_SUCCESS;
    if (capturing || !create_slot(ops, slot) || ops.event_record(slot.before, stream) != CUDA_SUCCESS) {
      // Events of a destroyed context fail from now on: make fresh ones next time.
      if (!capturing) slot = Slot{};
      phase_ = Phase::Invalid;
      probed = false;
    } else {
      t_pending = Pending{this, generation_, claimed_};
      ++claimed_;
      armed = true;
      next_at_.store(n + stride, std::memory_order_relaxed);
      const std::uint64_t left = clock.now_ns();
      own_ns_ += left > entered ? left - entered : 0;
      slot.recorded_ns = left;
      slot.launch_ns = 0;
    }
  }
  if (!armed) next_at_.store(kNever, std::memory_order_relaxed);
  unlock();
  return probed;
}

void BusyProbe::after_launch(const DriverOps& ops, Clock& clock, CUstream stream) {
  const Pending pending = t_pending;
  t_pending = Pending{};
  if (pending.probe != this) return;
  const std::uint64_t entered = clock.now_ns();
  lock();
  // A pair of a probe since collected (or invalidated) is dropped; one begun before its probe's
  // span ended still completes it.
  if ((phase_ == Phase::Running || phase_ == Phase::Ended) && pending.generation == generation_) {
    Slot& slot = slots_[pending.slot];
    slot.launch_ns = entered > slot.recorded_ns ? entered - slot.recorded_ns : 0;
    if (ops.event_record(slot.after, stream) == CUDA_SUCCESS) {
      ++completed_;
      const std::uint64_t left = clock.now_ns();
      own_ns_ += left > entered ? left - entered : 0;
    } else {
      slots_[pending.slot] = Slot{};
      phase_ = Phase::Invalid;
      next_at_.store(kNever, std::memory_order_relaxed);
    }
  }
  unlock();
}

void BusyProbe::exclude(std::uint64_t ns) {
  if (next_at_.load(std::memory_order_relaxed) == kNever) return;  // no span armed or running
  lock();
  if (phase_ == Phase::Running) own_ns_ += ns;
  unlock();
}

namespace {

// Where `event` completed relative to `ref` on the device's timeline, in ns (negative: before it).
// The driver's elapsed time is never negative: a later reference is asked the other way round.
bool offset_ns(const DriverOps& ops, CUevent ref, CUevent event, std::int64_t* ns) {
  std::uint64_t forward = 0;
  if (ops.event_elapsed_ns(ref, event, &forward) != CUDA_SUCCESS) return false;
  if (forward != 0 || event == ref) {
    *ns = static_cast<std::int64_t>(forward);
    return true;
  }
  std::uint64_t backward = 0;
  if (ops.event_elapsed_ns(event, ref, &backward) != CUDA_SUCCESS) return false;
  *ns = -static_cast<std::int64_t>(backward);
  return true;
}

}  // namespace

// The time any timed launch ran: the union of the pairs' spans on the device's timeline, each placed
// by its events' offsets from the first pair's `before`. Pairs on one stream follow each other, so
// their union is their sum; launches of several threads on several streams run side by side, and
// their sum would count the same device time once per stream (four streams of concurrent matmuls,
// each pair stretched by the others: charged for the full window while the device idled half of it).
bool BusyProbe::union_of_pairs(const DriverOps& ops, std::uint64_t* busy_ns) {
  struct Span {
    std::int64_t begin;
    std::int64_t end;
  };
  Span spans[kSlots];
  std::uint32_t count = 0;
  const CUevent ref = slots_[0].before;
  for (std::uint32_t i = 0; i < claimed_; ++i) {
    Span span{};
    if (!offset_ns(ops, ref, slots_[i].before, &span.begin) ||
        !offset_ns(ops, ref, slots_[i].after, &span.end))
      return false;
    // On an idle stream the kernel started no sooner than the launch call was made.
    if (slots_[i].idle) span.begin += static_cast<std::int64_t>(slots_[i].launch_ns);
    if (span.end <= span.begin) continue;
    // Insertion by start: at most kSlots pairs, read once per probed window.
    std::uint32_t at = count++;
    while (at > 0 && spans[at - 1].begin > span.begin) {
      spans[at] = spans[at - 1];
      --at;
    }
    spans[at] = span;
  }
  std::uint64_t total = 0;
  std::int64_t covered = 0;
  bool any = false;
  for (std::uint32_t i = 0; i < count; ++i) {
    const std::int64_t begin = any ? std::max(spans[i].begin, covered) : spans[i].begin;
    if (spans[i].end > begin) total += static_cast<std::uint64_t>(spans[i].end - begin);
    covered = any ? std::max(covered, spans[i].end) : spans[i].end;
    any = true;
  }
  *busy_ns = total;
  return true;
}

BusyProbe::Result BusyProbe::collect(const DriverOps& ops, std::uint64_t now, bool read,
                                     std::uint32_t launches) {
  lock();
  Result result;
  // A probe still running ends with the window. One with a launch half-way (a thread between its
  // gate and its launch) cannot be read: that kernel's time is unknown.
  if (phase_ == Phase::Running) {
    phase_ = Phase::Ended;
    end_ns_ = now;
    end_n_ = launches;
  }
  if (read && phase_ == Phase::Ended && claimed_ > 0 && completed_ == claimed_ && end_ns_ > start_ns_) {
    result.valid = union_of_pairs(ops, &result.busy_ns);
    // Every stride-th launch was timed: the span's launches ran about that many times the sum.
    const std::uint32_t spanned = end_n_ > first_n_ ? end_n_ - first_n_ : 0;
    if (spanned > claimed_) {
      result.busy_ns =
          static_cast<std::uint64_t>(static_cast<unsigned __int128>(result.busy_ns) * spanned / claimed_);
    }
    const std::uint64_t span = end_ns_ - start_ns_;
    result.span_ns = span > own_ns_ ? span - own_ns_ : 0;
  }
  if (!result.valid) result = Result{};
  result.timed = claimed_;
  phase_ = Phase::Idle;
  claimed_ = 0;
  completed_ = 0;
  next_at_.store(kNever, std::memory_order_relaxed);
  unlock();
  return result;
}

}  // namespace gpuslice::limiter
