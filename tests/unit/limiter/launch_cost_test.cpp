// LaunchCost (launch_cost.h), the measured wall time of one launch shared by the compute limiter
// and the priority gate's in-flight bound: how its samples of windows of launches move it.
#include "limiter/launch_cost.h"

#include <gtest/gtest.h>

namespace gpuslice::limiter {
namespace {

// One long kernel per window (each waited for): every sample is one launch. Halving a sum of one
// launch in whole launches kept it at 1 while the time doubled: the cost converged to twice the kernel.
TEST(LaunchCost, SingleLaunchSamplesGiveTheKernelLength) {
  LaunchCost cost;
  for (int i = 0; i < 20; ++i) cost.add(100'000'000, 1);
  EXPECT_NEAR(static_cast<double>(cost.per_launch_ns()), 100e6, 1e3);
}

// A run of short windows of another thread's cheap launches (a few launches each) must not drag an
// estimate made of thousands of launches down; a workload that really changed takes over quickly.
TEST(LaunchCost, FewLaunchSamplesBarelyMoveAnEstimateOfThousands) {
  LaunchCost cost;
  for (int i = 0; i < 4; ++i) cost.add(800 * 500'000ULL, 800);  // 500 us per launch
  for (int i = 0; i < 10; ++i) cost.add(5 * 20'000ULL, 5);      // 20 us per launch, 5 at a time
  EXPECT_GT(cost.per_launch_ns(), 450'000u);
  for (int i = 0; i < 6; ++i) cost.add(800 * 20'000ULL, 800);
  EXPECT_LT(cost.per_launch_ns(), 40'000u);
}

}  // namespace
}  // namespace gpuslice::limiter
