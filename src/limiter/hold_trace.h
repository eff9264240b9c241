// One part of the priority gate (priority_gate.h): the debug lines of one hold, so that a benchmark
// can tell whether a higher priority's slow request had this container held, how much it had queued
// then (the window, its predicted device time, the launch cap of a count and the average launch),
// and, from an event recorded behind that queue, how long the queued work took. One per gate() call
// on the launching thread's stack; nothing is recorded or logged unless the log is at debug level.
#pragma once

#include <cstdint>

#include "abi/cuda_abi.h"
#include "common/log.h"
#include "limiter/in_flight_bound.h"

namespace gpuslice::limiter {

class HoldTrace {
 public:
  explicit HoldTrace(InFlightBound& bound) : bound_(bound) {}

  // The hold begins at `now`, with the bound's window as it is (bound_at: the gate's bound).
  template <BoundAt F>
  void begin(CUstream stream, std::uint64_t now, const F& bound_at) {
    GS_LOG(Debug,
           "priority gate: held at %llu us, %u launches in the window (%llu us predicted), "
           "cap %llu, %llu ns a launch",
           static_cast<unsigned long long>(now / 1000), bound_.window_launches(),
           static_cast<unsigned long long>(bound_.window_predicted_ns() / 1000),
           static_cast<unsigned long long>(bound_.launch_cap(now, bound_at)),
           static_cast<unsigned long long>(bound_.per_launch_ns()));
    probing_ = log::enabled(log::Level::Debug) && bound_.start_queue_probe(stream);
  }
  // After each of the held thread's naps.
  void poll(std::uint64_t now) {
    if (probing_ && queue_done_ns_ == 0 && bound_.queue_probe_done()) queue_done_ns_ = now;
  }
  // The hold that began at `hold_start` ends at `now`.
  void end(std::uint64_t now, std::uint64_t hold_start);

 private:
  InFlightBound& bound_;
  bool probing_ = false;
  std::uint64_t queue_done_ns_ = 0;  // when the probe found the queued work done; 0: not yet
};

}  // namespace gpuslice::limiter
