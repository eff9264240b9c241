// A hand-driven clock and a model device for the priority gate's in-flight bound, shared by its
// tests (priority_gate_test.cpp and the policies' tests through the gate, in_flight_bound_test.cpp alone).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "abi/cuda_abi.h"
#include "common/clock.h"
#include "limiter/driver_ops.h"

namespace gpuslice::limiter {

inline constexpr std::uint64_t kUs = 1'000;
inline constexpr std::uint64_t kMs = 1'000'000;

class ManualClock final : public Clock {
 public:
  std::uint64_t now_ns() override { return now; }
  void sleep_ns(std::uint64_t ns) override {
    now += ns;
    slept += ns;
  }
  std::uint64_t now = 1'000'000'000;  // 1 s
  std::uint64_t slept = 0;
};

// A device for the pipelined bound: kernels run one after another from their launch;
// events complete with the last kernel launched before them. The clock is the test's.
class FakeDevice {
 public:
  static inline FakeDevice* current = nullptr;

  explicit FakeDevice(ManualClock& clock) : clock_(clock) { current = this; }
  ~FakeDevice() { current = nullptr; }

  void launch(std::uint64_t kernel_ns) {
    free_at_ = std::max(free_at_, clock_.now) + kernel_ns;
    const std::uint64_t queued = free_at_ - clock_.now;
    max_queued = std::max(max_queued, queued);
  }
  std::uint64_t queued() const { return free_at_ > clock_.now ? free_at_ - clock_.now : 0; }

  DriverOps ops() {
    DriverOps o;
    o.ctx_synchronize = [] {
      ++current->ctx_syncs;
      current->clock_.now = std::max(current->clock_.now, current->free_at_);
      return CUDA_SUCCESS;
    };
    o.stream_is_capturing = [](CUstream, int* status) {
      *status = current->capturing ? 1 : 0;
      return CUDA_SUCCESS;
    };
    o.ctx_id = [](std::uint64_t* id) {
      *id = current->ctx;
      return CUDA_SUCCESS;
    };
    o.event_create = [](CUevent* e) {
      if (current->fail_create) return CUDA_ERROR_OUT_OF_MEMORY;
      current->done_at.push_back(0);
      *e = reinterpret_cast<CUevent>(current->done_at.size());  // 1-based index
      return CUDA_SUCCESS;
    };
    o.event_record = [](CUevent e, CUstream s) {
      ++current->records;
      current->recorded_on.push_back(s);
      current->done_at[index(e)] = std::max(current->clock_.now, current->free_at_);
      return CUDA_SUCCESS;
    };
    o.event_synchronize = [](CUevent e) {
      ++current->event_syncs;
      if (current->fail_sync) return CUDA_ERROR_LAUNCH_FAILED;
      current->clock_.now = std::max(current->clock_.now, current->done_at[index(e)]);
      return CUDA_SUCCESS;
    };
    o.event_elapsed_ns = [](CUevent a, CUevent b, std::uint64_t* ns) {
      const std::uint64_t from = current->done_at[index(a)];
      const std::uint64_t to = current->done_at[index(b)];
      *ns = to > from ? to - from : 0;  // as the driver: never negative
      return CUDA_SUCCESS;
    };
    o.event_query = [](CUevent e) {
      return current->clock_.now >= current->done_at[index(e)] ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
    };
    return o;
  }

  std::uint64_t ctx = 7;
  bool capturing = false;
  bool fail_create = false;
  bool fail_sync = false;
  int ctx_syncs = 0;
  int records = 0;
  int event_syncs = 0;
  std::uint64_t max_queued = 0;
  std::vector<std::uint64_t> done_at;
  std::vector<CUstream> recorded_on;

 private:
  static std::size_t index(CUevent e) { return reinterpret_cast<std::size_t>(e) - 1; }
  ManualClock& clock_;
  std::uint64_t free_at_ = 0;
};

}  // namespace gpuslice::limiter
