// The in-flight bound alone, on the priority gate tests' model device: its windows close at half the
// bound the gate gives them, and a window over two queues drains. One kernel of 100 us, launched
// every 10 us of host time, keeps the device busy, so the events measure its cost exactly.
#include "limiter/in_flight_bound.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "fake_device.h"

namespace gpuslice::limiter {
namespace {

constexpr std::uint64_t kKernel = 42;  // one kernel and grid (kernel_key)

CUstream stream_handle(std::uintptr_t value) { return reinterpret_cast<CUstream>(value); }

class InFlightBoundTest : public ::testing::Test {
 protected:
  // One launch as the gate makes it: a step when due, the launch counted, then submitted.
  void launch(CUstream stream) {
    const auto bound_at = [this](std::uint64_t) {
      ++asked;
      return bound_ns;
    };
    clock.now += 10 * kUs;
    bound.step_if_due(stream, clock.now, kKernel, bound_at);
    bound.count_launch(stream, clock.now, kKernel);
    device.launch(100 * kUs);
  }
  void launch(int n, CUstream stream) {
    for (int i = 0; i < n; ++i) launch(stream);
  }
  // Launches until one steps with an event: that launch opened a new window.
  void until_a_step(CUstream stream) {
    const int records = device.records;
    for (int i = 0; i < 100 && device.records == records; ++i) launch(stream);
    ASSERT_GT(device.records, records);
  }

  ManualClock clock;
  FakeDevice device{clock};
  InFlightBound bound{
      clock,
      device.ops(),
      {.whole_ns = 2 * kMs, .initial_launch_cap = 2, .per_kernel_cost = true, .long_kernels_alone = false}};
  std::uint64_t bound_ns = 2 * kMs;  // what the gate's bound_now says
  int asked = 0;
  CUstream a = stream_handle(0x10);
  CUstream b = stream_handle(0x20);
};

TEST_F(InFlightBoundTest, AWindowClosesAtHalfTheBoundTheGateGivesOfPredictedDeviceTime) {
  launch(a);
  EXPECT_EQ(asked, 0) << "an empty window does not ask for the bound";
  launch(100, a);  // the kernel's cost is learnt from the events
  EXPECT_EQ(bound.kernels_costed(), 1U);
  until_a_step(a);
  int records = device.records;
  launch(100, a);
  EXPECT_EQ(device.records, records + 10) << "100 us predicted a launch: 1 ms windows of 10";
  bound_ns = 1 * kMs;  // a ramp, or a higher one's short requests
  until_a_step(a);
  records = device.records;
  launch(100, a);
  EXPECT_EQ(device.records, records + 20) << "0.5 ms windows of 5";
  EXPECT_EQ(device.ctx_syncs, 0);
  EXPECT_EQ(bound.drains(), 0U);
  EXPECT_LE(device.max_queued, 2 * kMs) << "this window and the previous one's rest at most";
}

TEST_F(InFlightBoundTest, AWindowOverTwoStreamsDrainsAndTheNextOnOneStreamStepsWithAnEventAgain) {
  launch(100, a);  // learnt: windows of 10
  until_a_step(a);
  const int records = device.records;
  launch(b);  // an event on either stream would not cover the other's launches
  launch(8, a);
  EXPECT_EQ(device.ctx_syncs, 0) << "the window holds 10 launches: not closed yet";
  launch(a);
  EXPECT_EQ(device.ctx_syncs, 1);
  EXPECT_EQ(bound.drains(), 1U);
  EXPECT_EQ(device.records, records) << "no event for a window over two queues";
  EXPECT_EQ(device.queued(), 100 * kUs) << "only the launch that closed it is left queued";
  until_a_step(a);
  EXPECT_EQ(device.ctx_syncs, 1) << "one stream again: an event, no drain";
}

}  // namespace
}  // namespace gpuslice::limiter
