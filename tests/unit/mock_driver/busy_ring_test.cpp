// BusyRing, the busy-time history behind the mock's NVML utilization.
#include "busy_ring.h"

#include <gtest/gtest.h>

namespace gpuslice::mock {
namespace {

constexpr std::uint64_t kMs = 1'000'000;
constexpr std::uint64_t kSecond = 1000 * kMs;

TEST(BusyRing, ContiguousWorkFormsOneExactRun) {
  BusyRing ring{};
  ring.record(10 * kSecond, 10 * kSecond + 5 * kMs);
  ring.record(10 * kSecond + 5 * kMs, 10 * kSecond + 8 * kMs);
  EXPECT_EQ(ring.run_start, 10 * kSecond);
  EXPECT_EQ(ring.run_end, 10 * kSecond + 8 * kMs);
  EXPECT_EQ(ring.busy_between(10 * kSecond, 11 * kSecond), 8 * kMs);
  EXPECT_EQ(ring.busy_between(10 * kSecond + 2 * kMs, 10 * kSecond + 3 * kMs), 1 * kMs);
  EXPECT_EQ(ring.busy_between(9 * kSecond, 10 * kSecond), 0u);
}

TEST(BusyRing, SettledRunsStayCountedWithinTheirBuckets) {
  BusyRing ring{};
  ring.record(10 * kSecond, 10 * kSecond + 100 * kMs);              // bucket-aligned run
  ring.record(10 * kSecond + 500 * kMs, 10 * kSecond + 510 * kMs);  // a gap settles the first
  EXPECT_EQ(ring.busy_between(10 * kSecond, 11 * kSecond), 110 * kMs);
  EXPECT_EQ(ring.busy_between(10 * kSecond + 100 * kMs, 11 * kSecond), 10 * kMs);
  // A window cutting a settled bucket takes a proportional share of it.
  EXPECT_EQ(ring.busy_between(10 * kSecond + 90 * kMs, 10 * kSecond + 200 * kMs), 10 * kMs);
}

TEST(BusyRing, OldBucketsAreForgottenWhenReused) {
  BusyRing ring{};
  const std::uint64_t later = 10 * kSecond + BusyRing::kSpanNs;  // lands in the same bucket slots
  ring.record(10 * kSecond, 10 * kSecond + 20 * kMs);
  ring.record(later, later + 20 * kMs);
  ring.record(30 * kSecond, 30 * kSecond + 1 * kMs);  // settles the second run over the first
  EXPECT_EQ(ring.busy_between(10 * kSecond, 10 * kSecond + 20 * kMs), 0u);
  EXPECT_EQ(ring.busy_between(later, later + 20 * kMs), 20 * kMs);
  EXPECT_EQ(ring.busy_between(29 * kSecond, 31 * kSecond), 1 * kMs);
}

TEST(BusyRing, ALongRunIsClampedToTheWindow) {
  BusyRing ring{};
  ring.record(kSecond, 100 * kSecond);
  EXPECT_EQ(ring.busy_between(50 * kSecond, 51 * kSecond), kSecond);
  EXPECT_EQ(ring.busy_between(0, 2 * kSecond), kSecond);
  ring.record(200 * kSecond, 201 * kSecond);
  EXPECT_EQ(ring.busy_between(99 * kSecond, 100 * kSecond), kSecond);  // settled tail of the long run
}

TEST(BusyRing, EmptyIntervalsAreIgnored) {
  BusyRing ring{};
  ring.record(5 * kSecond, 5 * kSecond);
  EXPECT_EQ(ring.run_end, 0u);
  EXPECT_EQ(ring.busy_between(0, 10 * kSecond), 0u);
  EXPECT_EQ(ring.busy_between(10 * kSecond, 5 * kSecond), 0u);
}

}  // namespace
}  // namespace gpuslice::mock
