// Compute (SM time) limiter, SPEC §4. See docs/compute-limiter.md for the algorithm.
// The launch hooks call gate() before submitting work, and only when a limit is configured for the
// device: with no limit nothing here runs (no thread, no per-launch work beyond one branch).
#pragma once

#include <cstdint>

#include "abi/cuda_abi.h"
#include "common/clock.h"
#include "shared_state/compute_shared.h"

namespace gpuslice::limiter {

// The real driver entry points the limiter may use (never our hooks, to avoid recursion).
struct DriverOps {
  CUresult (*ctx_synchronize)() = nullptr;
  CUresult (*stream_synchronize)(CUstream) = nullptr;
};

class ComputeLimiter {
 public:
  // `shared` is the device's budget in the container's state file; `limit_percent` is read through
  // `limit_source` at each decision so live changes apply (0 = unlimited).
  ComputeLimiter(Clock& clock, const DriverOps& ops, shm::ComputeShared* shared,
                 const unsigned* limit_source);

  // Called before each kernel/graph launch on this device. May sleep (throttle) and may drain the
  // queue to measure how long the device was busy. Returns quickly when within budget.
  void gate(CUstream stream);

  // Called at exit or context teardown: charge outstanding work.
  void settle();

 private:
  struct State;
  Clock& clock_;
  DriverOps ops_;
  shm::ComputeShared* shared_;
  const unsigned* limit_source_;
  std::uint64_t window_start_ns_ = 0;
  bool window_open_ = false;
};

}  // namespace gpuslice::limiter
