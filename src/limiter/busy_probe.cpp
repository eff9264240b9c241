#include "limiter/busy_probe.h"

#include "limiter/compute_limiter.h"

namespace gpuslice::limiter {
namespace {

// Identifies the calling thread without a syscall: the address of a thread-local.
thread_local char t_thread_marker = 0;

}  // namespace

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

bool BusyProbe::probe_launch(const DriverOps& ops, CUstream stream, std::uint64_t now, std::uint32_t n) {
  const void* me = &t_thread_marker;
  lock();
  bool probed = false;
  switch (phase_) {
    case Phase::Idle:
      if (n < start_at_.load(std::memory_order_relaxed)) break;  // disarmed meanwhile
      phase_ = Phase::Running;
      owner_ = me;
      first_launch_ = n;
      count_ = 0;
      pending_ = false;
      start_ns_ = now;
      probed = true;
      break;
    case Phase::Running:
      // Another thread's launch, or one of ours the probe missed: its kernels are not in the sum,
      // so the sum says nothing about the window. It is charged in full.
      if (owner_ != me || pending_ || n != first_launch_ + count_) {
        phase_ = Phase::Invalid;
        break;
      }
      if (count_ >= kSlots || now - start_ns_ >= kMaxSpanNs) {
        phase_ = Phase::Ended;
        end_ns_ = now;
        break;
      }
      probed = true;
      break;
    case Phase::Ended:
    case Phase::Invalid:
      break;
  }
  if (probed) {
    Slot& slot = slots_[count_];
    // Work captured into a graph runs later, and an event there would join the capture.
    const bool capturing = stream_capturing(ops, stream);
    if (capturing || !create_slot(ops, slot) || ops.event_record(slot.before, stream) != CUDA_SUCCESS) {
      // Events of a destroyed context fail from now on: make fresh ones next time.
      if (!capturing) slot = Slot{};
      phase_ = Phase::Invalid;
      probed = false;
    } else {
      pending_ = true;
    }
  }
  if (!probed) start_at_.store(kNever, std::memory_order_relaxed);
  unlock();
  return probed;
}

void BusyProbe::after_launch(const DriverOps& ops, CUstream stream) {
  lock();
  if (phase_ == Phase::Running && pending_ && owner_ == &t_thread_marker) {
    if (ops.event_record(slots_[count_].after, stream) == CUDA_SUCCESS) {
      ++count_;
      pending_ = false;
    } else {
      slots_[count_] = Slot{};
      phase_ = Phase::Invalid;
      start_at_.store(kNever, std::memory_order_relaxed);
    }
  }
  unlock();
}

BusyProbe::Result BusyProbe::collect(const DriverOps& ops, std::uint64_t now, bool read) {
  lock();
  Result result;
  // A probe still running ends with the window; one whose launch is half-way (another thread is
  // between its gate and its launch) cannot be read.
  if (phase_ == Phase::Running && !pending_) {
    phase_ = Phase::Ended;
    end_ns_ = now;
  }
  if (read && phase_ == Phase::Ended && count_ > 0 && end_ns_ > start_ns_) {
    result.valid = true;
    for (std::uint32_t i = 0; i < count_ && result.valid; ++i) {
      std::uint64_t ns = 0;
      if (ops.event_elapsed_ns(slots_[i].before, slots_[i].after, &ns) != CUDA_SUCCESS) {
        result.valid = false;
      }
      result.busy_ns += ns;
    }
    result.span_ns = end_ns_ - start_ns_;
  }
  if (!result.valid) result = Result{};
  phase_ = Phase::Idle;
  count_ = 0;
  pending_ = false;
  owner_ = nullptr;
  start_at_.store(kNever, std::memory_order_relaxed);
  unlock();
  return result;
}

}  // namespace gpuslice::limiter
