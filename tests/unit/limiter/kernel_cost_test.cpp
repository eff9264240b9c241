// KernelCosts: the priority gate's cost of a launch by kernel, learnt from windows' measured times.
#include "limiter/kernel_cost.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace gpuslice::limiter {
namespace {

constexpr std::uint64_t kUs = 1'000;

TEST(KernelCosts, AnUnknownKernelCostsTheFallbackAndZeroIsNeverLearnt) {
  KernelCosts costs;
  EXPECT_EQ(costs.predict(42, 7 * kUs), 7 * kUs);
  std::vector<std::uint64_t> scratch(4);
  const std::uint64_t keys[] = {0, 0};
  costs.learn(keys, 2, 100 * kUs, 7 * kUs, scratch.data());
  EXPECT_EQ(costs.known(), 0U);
  EXPECT_EQ(costs.predict(0, 7 * kUs), 7 * kUs);
}

// Two kernels that always come together are known only as a sum, but windows of different mixes
// (as a training step's windows are) tell them apart: the projections converge to each one's cost.
TEST(KernelCosts, WindowsOfDifferentMixesSeparateTheKernels) {
  KernelCosts costs;
  std::vector<std::uint64_t> scratch(64);
  const std::uint64_t light = kernel_key(reinterpret_cast<const void*>(0x1000), 64, 1, 1);
  const std::uint64_t heavy = kernel_key(reinterpret_cast<const void*>(0x2000), 1024, 1, 1);
  ASSERT_NE(light, heavy);
  for (int round = 0; round < 50; ++round) {
    for (int heavies = 0; heavies <= 4; ++heavies) {  // 10 launches, 0 to 4 of them heavy
      std::vector<std::uint64_t> keys(10, light);
      for (int i = 0; i < heavies; ++i) keys[i] = heavy;
      const std::uint64_t ns = static_cast<std::uint64_t>(heavies) * 800 * kUs +
                               static_cast<std::uint64_t>(10 - heavies) * 10 * kUs;
      costs.learn(keys.data(), keys.size(), ns, 40 * kUs, scratch.data());
    }
  }
  EXPECT_NEAR(static_cast<double>(costs.predict(heavy, 0)), 800.0 * kUs, 5.0 * kUs);
  EXPECT_NEAR(static_cast<double>(costs.predict(light, 0)), 10.0 * kUs, 2.0 * kUs);
  EXPECT_EQ(costs.known(), 2U);
}

// One window is projected exactly: its prediction afterwards is what it measured.
TEST(KernelCosts, AWindowsPredictionBecomesItsMeasuredTime) {
  KernelCosts costs;
  std::vector<std::uint64_t> scratch(8);
  const std::uint64_t keys[] = {5, 6, 5, 5, 7};
  costs.learn(keys, 5, 500 * kUs, 20 * kUs, scratch.data());
  std::uint64_t predicted = 0;
  for (const std::uint64_t k : keys) predicted += costs.predict(k, 20 * kUs);
  EXPECT_NEAR(static_cast<double>(predicted), 500.0 * kUs, 5.0);
}

// A projection never takes a cost below a launch's own device time, whatever the window measured.
TEST(KernelCosts, CostsStayAtLeastAMicrosecond) {
  KernelCosts costs;
  std::vector<std::uint64_t> scratch(4);
  const std::uint64_t keys[] = {9, 10};
  costs.learn(keys, 2, 1, 500 * kUs, scratch.data());  // far less than predicted
  EXPECT_GE(costs.predict(9, 0), kUs);
  EXPECT_GE(costs.predict(10, 0), kUs);
}

// The grid is part of the key: one elementwise kernel serves every size.
TEST(KernelCosts, TheKeyTellsGridsOfOneFunctionApartAndIsNeverZero) {
  const void* f = reinterpret_cast<const void*>(0x1234);
  EXPECT_NE(kernel_key(f, 1, 1, 1), kernel_key(f, 1024, 1, 1));
  EXPECT_EQ(kernel_key(f, 8, 2, 1), kernel_key(f, 8, 2, 1));
  EXPECT_NE(kernel_key(nullptr, 0, 0, 0), 0U);
}

}  // namespace
}  // namespace gpuslice::limiter
