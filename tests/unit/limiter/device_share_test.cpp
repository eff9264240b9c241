// DeviceShare (device_share.h): a container's share is measured only in windows in which lower
// ones hold for it, trusted for a while, then measured again.
#include "limiter/device_share.h"

#include <gtest/gtest.h>

#include "fake_device.h"

namespace gpuslice::limiter {
namespace {

class DeviceShareTest : public ::testing::Test {
 protected:
  ManualClock clock;
  FakeDevice device{clock};
  DriverOps ops = device.ops();
  DeviceShare::Timing timing = [] {
    DeviceShare::Timing t;
    t.every_ns = 100 * kMs;
    t.ttl_ns = 1'000 * kMs;
    t.settle_ns = 20 * kMs;
    return t;
  }();
  DeviceShare share{timing};

  // A request: `kernels` launches of `kernel_ns`, `gap_ns` of host work after each, then a host
  // synchronisation. Returns whether the share published changed.
  bool request(int kernels, std::uint64_t kernel_ns, std::uint64_t gap_ns) {
    for (int k = 0; k < kernels; ++k) {
      const bool timed = share.before_launch(ops, clock, nullptr, clock.now);
      device.launch(kernel_ns);
      if (timed) share.after_launch(ops, clock, nullptr);
      clock.now += gap_ns;
    }
    ops.ctx_synchronize();
    return share.note_idle(ops, clock.now);
  }
};

TEST_F(DeviceShareTest, TheFirstSpanWaitsUntilLowerOnesHaveSettled) {
  EXPECT_FALSE(request(100, 10 * kUs, 30 * kUs)) << "within settle_ns of the first launch";
  EXPECT_EQ(share.permille(), 0U);
  clock.now += 20 * kMs;
  EXPECT_TRUE(request(100, 10 * kUs, 30 * kUs));
  EXPECT_NEAR(share.permille(), 333, 10) << "10 us of kernel in every 30 us of host time";
  EXPECT_EQ(share.measured_permille(), share.permille());
}

TEST_F(DeviceShareTest, AMeasuredShareIsTrustedForItsTtlThenMeasuredAgainWhileLowerOnesHold) {
  request(1, 10 * kUs, 0);
  clock.now += 20 * kMs;
  ASSERT_TRUE(request(100, 10 * kUs, 30 * kUs));
  const std::uint32_t measured = share.permille();
  // Within the ttl: no span runs, nothing is sampled, even from device-bound work (which beside a
  // lower one running free would be its time slices as much as ours).
  clock.now += 200 * kMs;
  EXPECT_FALSE(share.tick(clock.now));
  EXPECT_FALSE(request(10, kMs, 0));
  EXPECT_EQ(share.permille(), measured);
  // The ttl passed: the record says "not measured" (lower ones hold) until the next sample.
  clock.now = clock.now + timing.ttl_ns;
  EXPECT_TRUE(share.tick(clock.now));
  EXPECT_EQ(share.permille(), 0U);
  EXPECT_EQ(share.measured_permille(), measured);
  EXPECT_FALSE(share.tick(clock.now + timing.ttl_ns)) << "a window already open";
  EXPECT_FALSE(request(100, 10 * kUs, 30 * kUs)) << "within settle_ns of the window's opening";
  clock.now += 20 * kMs;
  EXPECT_TRUE(request(100, 10 * kUs, 30 * kUs));
  EXPECT_NEAR(share.permille(), 333, 10);
}

TEST_F(DeviceShareTest, ARisingSampleWeighsAHalfAFallingOneAQuarter) {
  request(1, 10 * kUs, 0);
  clock.now += 20 * kMs;
  ASSERT_TRUE(request(100, 10 * kUs, 30 * kUs));  // 333
  clock.now += timing.ttl_ns;
  share.tick(clock.now);
  clock.now += 20 * kMs;
  ASSERT_TRUE(request(10, kMs, 0));  // device-bound: 1000
  EXPECT_NEAR(share.permille(), 666, 10) << "333 + (1000 - 333) / 2";
  clock.now += timing.ttl_ns;
  share.tick(clock.now);
  clock.now += 20 * kMs;
  ASSERT_TRUE(request(100, 10 * kUs, 30 * kUs));  // 333 again
  EXPECT_NEAR(share.permille(), 583, 10) << "666 - (666 - 333) / 4";
}

}  // namespace
}  // namespace gpuslice::limiter
