#include "shared_state/turn_order.h"

#include <gtest/gtest.h>

#include <vector>

namespace gpuslice::shm {
namespace {

constexpr std::uint64_t kPeriod = 100'000'000;

PeerState peer(std::uint64_t key, unsigned percent) {
  PeerState p;
  p.container_key = key;
  p.compute_limit_percent = percent;
  return p;
}

TEST(TurnOrder, AContainerAloneTakesNoTurns) { EXPECT_EQ(turn_offset(11, 30, nullptr, 0, kPeriod), kNoTurn); }

TEST(TurnOrder, TwoContainersTakeConsecutiveTurnsInKeyOrder) {
  PeerState b = peer(22, 70), a = peer(11, 30);
  EXPECT_EQ(turn_offset(11, 30, &b, 1, kPeriod), 0U);
  EXPECT_EQ(turn_offset(22, 70, &a, 1, kPeriod), 30 * kPeriod / 100);
}

TEST(TurnOrder, EveryContainerAgreesOnTheCycle) {
  std::vector<PeerState> all = {peer(5, 20), peer(9, 30), peer(3, 25)};
  std::vector<std::uint64_t> offsets;
  for (const PeerState& self : all) {
    std::vector<PeerState> others;
    for (const PeerState& p : all)
      if (p.container_key != self.container_key) others.push_back(p);
    offsets.push_back(
        turn_offset(self.container_key, self.compute_limit_percent, others.data(), others.size(), kPeriod));
  }
  EXPECT_EQ(offsets[2], 0U);                  // key 3 first
  EXPECT_EQ(offsets[0], 25 * kPeriod / 100);  // then key 5
  EXPECT_EQ(offsets[1], 45 * kPeriod / 100);  // then key 9
}

TEST(TurnOrder, UnlimitedContainersDoNotTakeTurns) {
  PeerState full = peer(22, 100), none = peer(33, 0);
  PeerState both[] = {full, none};
  EXPECT_EQ(turn_offset(11, 50, both, 2, kPeriod), kNoTurn);
  PeerState limited = peer(22, 50);
  EXPECT_EQ(turn_offset(11, 0, &limited, 1, kPeriod), kNoTurn) << "an unlimited container takes no turn";
}

TEST(TurnOrder, OwnRecordAmongThePeersIsIgnored) {
  PeerState self = peer(11, 30);
  EXPECT_EQ(turn_offset(11, 30, &self, 1, kPeriod), kNoTurn);
}

TEST(TurnOrder, OffsetsWrapAroundTheCycle) {
  PeerState before[] = {peer(1, 90), peer(2, 40)};
  EXPECT_EQ(turn_offset(3, 10, before, 2, kPeriod), 30 * kPeriod / 100);
}

}  // namespace
}  // namespace gpuslice::shm
