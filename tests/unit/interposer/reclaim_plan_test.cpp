// Who gives back what (interposer/reclaim/reclaim_plan.h): the borrowers' order and bounds.
#include "interposer/reclaim/reclaim_plan.h"

#include <gtest/gtest.h>

#include <vector>

namespace gpuslice::interposer::reclaim {
namespace {

constexpr std::uint64_t kMiB = 1ULL << 20;

std::vector<std::uint64_t> shares(const std::vector<Holder>& holders, const std::vector<Asker>& askers,
                                  std::uint64_t free = 0) {
  std::vector<std::uint64_t> out;
  for (std::size_t i = 0; i < holders.size(); ++i)
    out.push_back(share_of(holders.data(), holders.size(), i, askers.data(), askers.size(), free));
  return out;
}

TEST(ReclaimPlan, TheLowestLevelGivesFirst) {
  const std::vector<Holder> holders{{1, 10, Priority::Normal, 100 * kMiB, 100 * kMiB},
                                    {2, 20, Priority::Low, 100 * kMiB, 100 * kMiB}};
  const std::vector<Asker> askers{{3, Priority::High, false, 150 * kMiB}};
  EXPECT_EQ(shares(holders, askers), (std::vector<std::uint64_t>{50 * kMiB, 100 * kMiB}));
}

TEST(ReclaimPlan, AtOneLevelTheContainerWithTheMostAboveItsGuaranteeGivesFirst) {
  const std::vector<Holder> holders{{1, 10, Priority::Low, 60 * kMiB, 60 * kMiB},
                                    {2, 20, Priority::Low, 200 * kMiB, 200 * kMiB}};
  const std::vector<Asker> askers{{3, Priority::Normal, true, 150 * kMiB}};
  EXPECT_EQ(shares(holders, askers), (std::vector<std::uint64_t>{0, 150 * kMiB}));
}

TEST(ReclaimPlan, OnlyWhatTheDeviceLacksIsAskedFor) {
  const std::vector<Holder> holders{{1, 10, Priority::Low, 100 * kMiB, 100 * kMiB}};
  const std::vector<Asker> askers{{3, Priority::Normal, true, 100 * kMiB}};
  EXPECT_EQ(shares(holders, askers, 60 * kMiB), (std::vector<std::uint64_t>{40 * kMiB}));
  EXPECT_EQ(shares(holders, askers, 100 * kMiB), (std::vector<std::uint64_t>{0}));
}

TEST(ReclaimPlan, NoContainerGivesMoreThanItHoldsAboveItsGuarantee) {
  // Two processes of container 1: 80 MiB movable each, the container 100 MiB above its guarantee.
  const std::vector<Holder> holders{{1, 10, Priority::Low, 100 * kMiB, 80 * kMiB},
                                    {1, 11, Priority::Low, 100 * kMiB, 80 * kMiB},
                                    {2, 20, Priority::Low, 30 * kMiB, 500 * kMiB}};
  const std::vector<Asker> askers{{3, Priority::High, true, 1000 * kMiB}};
  EXPECT_EQ(shares(holders, askers), (std::vector<std::uint64_t>{80 * kMiB, 20 * kMiB, 30 * kMiB}));
}

TEST(ReclaimPlan, AnAskerAboveItsGuaranteeAtTheSameLevelGetsNothing) {
  const std::vector<Holder> holders{{1, 10, Priority::Normal, 100 * kMiB, 100 * kMiB}};
  EXPECT_EQ(shares(holders, {{3, Priority::Normal, false, 50 * kMiB}}), (std::vector<std::uint64_t>{0}));
  EXPECT_EQ(shares(holders, {{3, Priority::Low, false, 50 * kMiB}}), (std::vector<std::uint64_t>{0}));
  // Its own container's borrowed memory is never asked for, whatever it claims.
  EXPECT_EQ(shares(holders, {{1, Priority::High, true, 50 * kMiB}}), (std::vector<std::uint64_t>{0}));
}

TEST(ReclaimPlan, AHigherLevelAsksOnlyTheLowerOnes) {
  const std::vector<Holder> holders{{1, 10, Priority::High, 100 * kMiB, 100 * kMiB},
                                    {2, 20, Priority::Low, 30 * kMiB, 30 * kMiB}};
  const std::vector<Asker> askers{{3, Priority::Normal, false, 100 * kMiB}};
  EXPECT_EQ(shares(holders, askers), (std::vector<std::uint64_t>{0, 30 * kMiB}));
}

TEST(ReclaimPlan, WithinItsGuaranteeAContainerMayAskAnyBorrowerEvenAHigherOne) {
  const std::vector<Holder> holders{{1, 10, Priority::High, 100 * kMiB, 100 * kMiB}};
  const std::vector<Asker> askers{{3, Priority::Low, true, 40 * kMiB}};
  EXPECT_EQ(shares(holders, askers), (std::vector<std::uint64_t>{40 * kMiB}));
}

TEST(ReclaimPlan, SeveralAskersAddUp) {
  const std::vector<Holder> holders{{1, 10, Priority::Low, 500 * kMiB, 500 * kMiB}};
  const std::vector<Asker> askers{{3, Priority::Normal, true, 100 * kMiB},
                                  {4, Priority::High, false, 50 * kMiB},
                                  {5, Priority::Low, false, 70 * kMiB}};  // not entitled: not counted
  EXPECT_EQ(shares(holders, askers, 10 * kMiB), (std::vector<std::uint64_t>{140 * kMiB}));
}

}  // namespace
}  // namespace gpuslice::interposer::reclaim
