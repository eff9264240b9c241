// BusySignal (busy_signal.h), the busy time a container's record tells lower priorities, on its own
// with times given by hand (the gate's own tests reach it through its launches and waits).
#include "limiter/busy_signal.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "fake_device.h"

namespace gpuslice::limiter {
namespace {

class BusySignalAlone : public ::testing::Test {
 protected:
  static constexpr BusySignal::Timing kTiming{
      .busy_horizon_ns = 10 * kMs, .sync_lease_ns = 1'000 * kMs, .resume_grace_ns = 500 * kUs};

  // One request of a server: launches for `length`, then a wait that finds the work done.
  void request(std::uint64_t length) {
    signal.note_launch_begins(now);
    signal.note_busy(now);
    signal.note_launched(now);
    now += length;
    signal.note_sync_begin(now, true);
    ASSERT_TRUE(signal.idle_since_sync_began());
    signal.note_sync_return(now, true);
  }

  std::uint64_t now = 1'000 * kMs;
  BusySignal signal{kTiming};
};

TEST_F(BusySignalAlone, ALaunchAfterIdlingSaysBusyForAHorizonRenewedOnlyWhenHalfIsLeft) {
  EXPECT_EQ(signal.until_ns(), 0U) << "never busy";
  EXPECT_TRUE(signal.note_busy(now));
  EXPECT_EQ(signal.until_ns(), now + kTiming.busy_horizon_ns);
  const std::uint64_t first = now;
  now += kTiming.busy_horizon_ns / 2;
  EXPECT_FALSE(signal.note_busy(now)) << "half a horizon left";
  EXPECT_EQ(signal.until_ns(), first + kTiming.busy_horizon_ns);
  now += 1;
  EXPECT_TRUE(signal.note_busy(now));
  EXPECT_EQ(signal.until_ns(), now + kTiming.busy_horizon_ns);
  signal.settle();
  EXPECT_EQ(signal.until_ns(), 0U);
}

TEST_F(BusySignalAlone, AWaitForLaunchedWorkIsBusyForTheLeaseAndItsReturnIdleAfterTheGrace) {
  signal.note_busy(now);
  signal.note_launched(now);
  now += 1 * kMs;
  EXPECT_TRUE(signal.note_sync_begin(now, true));
  EXPECT_EQ(signal.until_ns(), now + kTiming.sync_lease_ns);
  now += 3 * kMs;
  EXPECT_TRUE(signal.idle_since_sync_began());
  EXPECT_TRUE(signal.note_sync_return(now, true));
  EXPECT_EQ(signal.until_ns(), now + kTiming.resume_grace_ns);
  const std::uint64_t grace_end = signal.until_ns();
  EXPECT_FALSE(signal.note_sync_begin(now + 1, true))
      << "a wait in the grace, nothing launched: says nothing";
  EXPECT_EQ(signal.until_ns(), grace_end);
}

TEST_F(BusySignalAlone, AWaitThatSawALaunchOrWithNobodyBelowSaysNothing) {
  signal.note_busy(now);
  EXPECT_FALSE(signal.note_sync_begin(now, false)) << "Low: nobody below to tell";
  EXPECT_EQ(signal.until_ns(), now + kTiming.busy_horizon_ns);
  now += 1 * kMs;
  signal.note_launched(now);  // another thread launched during the wait
  EXPECT_FALSE(signal.idle_since_sync_began());
  signal.note_sync_begin(now + 1, true);
  EXPECT_TRUE(signal.idle_since_sync_began());
  EXPECT_FALSE(BusySignal(kTiming).note_sync_begin(now, true)) << "never busy: an idle wait";
}

// The grace is kept only while it pays: a launch that came after it ended makes the next wait's
// return idle at once, and one within it brings the grace back.
TEST_F(BusySignalAlone, TheGraceIsKeptOnlyWhileTheNextLaunchComesWithinIt) {
  request(2 * kMs);
  EXPECT_EQ(signal.until_ns(), now + kTiming.resume_grace_ns);
  now += kTiming.resume_grace_ns + 1;  // the next launch comes after the grace
  request(2 * kMs);
  EXPECT_EQ(signal.until_ns(), now) << "idle at once";
  now += kTiming.resume_grace_ns - 1;  // within it
  request(2 * kMs);
  EXPECT_EQ(signal.until_ns(), now + kTiming.resume_grace_ns);
}

TEST_F(BusySignalAlone, EachBusyPeriodMovesAMeanOfWeightAQuarter) {
  request(2 * kMs);
  EXPECT_EQ(signal.period_ns(), 2 * kMs);
  now += 20 * kMs;
  request(6 * kMs);
  EXPECT_EQ(signal.period_ns(), 3 * kMs) << "3/4 of 2 ms and 1/4 of 6 ms";
  now += 20 * kMs;
  request(3 * kMs + 100 * kUs);
  EXPECT_EQ(signal.period_ns(), 3 * kMs + 25 * kUs);
  now += 20 * kMs;
  signal.note_busy(now);
  now += 1 * kMs;
  signal.note_sync_return(now, false);
  EXPECT_EQ(signal.period_ns(), 3 * kMs + 25 * kUs) << "Low: no period";
}

// A wait that finds the work done long after the busy horizon passed (no lease: the wait began
// after it) changes the record only through the mean: worth a publish when it moved by over 1/8.
TEST_F(BusySignalAlone, AReturnPastTheHorizonIsWorthAPublishOnlyWhenTheMeanMovedByMoreThanAnEighth) {
  const auto request_past_the_horizon = [&](std::uint64_t length) {
    now += 20 * kMs;
    signal.note_busy(now);
    now += length;
    EXPECT_FALSE(signal.note_sync_begin(now, true)) << "the horizon has passed";
    return signal.note_sync_return(now, true);
  };
  EXPECT_TRUE(request_past_the_horizon(12 * kMs)) << "the first period";
  EXPECT_FALSE(request_past_the_horizon(12'500 * kUs)) << "moved by 125 us";
  EXPECT_EQ(signal.period_ns(), 12'125 * kUs);
  EXPECT_TRUE(request_past_the_horizon(30 * kMs));
  EXPECT_LT(signal.until_ns(), now) << "idle since the horizon";
}

}  // namespace
}  // namespace gpuslice::limiter
