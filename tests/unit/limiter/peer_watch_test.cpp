// PeerWatch (peer_watch.h), the priority gate's view of the containers above it: which records it
// reads and how often, which it ignores, and what it makes of the rest. First through the gate, as
// a launching thread meets it, then on its own.
#include "limiter/peer_watch.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "fake_device.h"
#include "gate_fixture.h"
#include "limiter/priority_gate.h"

namespace gpuslice::limiter {
namespace {

TEST(PeerWatchThroughTheGate, PeersAreReadAtMostOncePerRefresh) {
  ManualClock clock;
  FakeBoard board;
  board.peers.push_back(peer(Priority::High, clock.now));
  auto prio = source(Priority::Low);
  PriorityGate gate(clock, counting_ops(), &board, &prio);
  for (int i = 0; i < 1000; ++i) {
    clock.now += 10 * kUs;
    board.peers[0].heartbeat_ns = clock.now;
    gate.gate(nullptr);
  }
  // 10 ms of launches: one read per refresh.
  const auto per_refresh = static_cast<int>(10 * kMs / PriorityTuning{}.refresh_ns);
  EXPECT_GE(board.reads + board.rereads, per_refresh - 1);
  EXPECT_LE(board.reads + board.rereads, per_refresh + 1);
  EXPECT_EQ(board.reads, 1) << "one full look; the known higher record is re-read after it";
  EXPECT_TRUE(board.published.empty()) << "Low has nobody below it to tell it is busy";
}

// The cost that took a quarter of a launch-bound trainer's rate: a full look at the node channel
// every refresh. Now it happens every absent_refresh_ns whatever the peers; in between only the
// higher record is re-read.
TEST(PeerWatchThroughTheGate, BesideAHigherPeerTheRecordsAreScannedOnlyEveryAbsentRefresh) {
  ManualClock clock;
  FakeBoard board;
  board.peers.push_back(peer(Priority::High, clock.now));
  board.peers.push_back(peer(Priority::Low, clock.now));
  auto prio = source(Priority::Normal);
  PriorityGate gate(clock, counting_ops(), &board, &prio);
  for (int i = 0; i < 100000; ++i) {  // 1 s of launches every 10 us
    clock.now += 10 * kUs;
    for (PeerView& p : board.peers) p.heartbeat_ns = clock.now;
    gate.gate(nullptr);
  }
  EXPECT_GE(board.reads, 9);
  EXPECT_LE(board.reads, 11);
  const auto refreshes = static_cast<int>(1000 * kMs / PriorityTuning{}.refresh_ns);
  EXPECT_GE(board.rereads, refreshes - 20);
  EXPECT_LE(board.rereads, refreshes);
  EXPECT_EQ(gate.stats().scans, static_cast<std::uint64_t>(board.reads));
  EXPECT_EQ(gate.stats().rereads, static_cast<std::uint64_t>(board.rereads));
}

TEST(PeerWatchThroughTheGate, ALowContainerWithNoHigherPeerPerformsNoChannelReadsPerLaunch) {
  ManualClock clock;
  FakeBoard board;
  board.peers.push_back(peer(Priority::Low, clock.now, clock.now + 1'000 * kMs));  // busy, not above
  auto prio = source(Priority::Low);
  PriorityGate gate(clock, counting_ops(), &board, &prio);
  for (int i = 0; i < 100000; ++i) {  // 100k launches in 1 s
    clock.now += 10 * kUs;
    board.peers[0].heartbeat_ns = clock.now;
    gate.gate(nullptr);
  }
  EXPECT_LE(board.reads, 11) << "one full look per absent_refresh_ns";
  EXPECT_EQ(board.rereads, 0) << "nothing known above: nothing to re-read";
  EXPECT_EQ(g_syncs, 0);
  EXPECT_EQ(gate.stats().holds, 0U);
}

TEST(PeerWatchThroughTheGate, AHigherContainerThatAppearsIsSeenAtTheNextFullLook) {
  ManualClock clock;
  FakeBoard board;
  auto prio = source(Priority::Low);
  PriorityGate gate(clock, counting_ops(), &board, &prio);
  gate.gate(nullptr);  // the first look: nobody
  const std::uint64_t appeared = clock.now;
  board.peers.push_back(peer(Priority::High, clock.now, clock.now + 10'000 * kMs));
  while (gate.stats().holds == 0 && clock.now - appeared < 1'000 * kMs) {
    clock.now += 10 * kUs;
    board.peers[0].heartbeat_ns = clock.now;
    gate.gate(nullptr);
  }
  EXPECT_EQ(gate.stats().holds, 1U);
  EXPECT_LE(clock.now - appeared - gate.stats().held_back_ns, PriorityTuning{}.absent_refresh_ns + 20 * kUs);
}

// Reading the records scans the node channel: High never needs them, and without a live
// higher-priority container they are read only every absent_refresh_ns.
TEST(PeerWatchThroughTheGate, RecordsAreReadRarelyWithNobodyAboveAndNeverByHigh) {
  for (const Priority own : {Priority::High, Priority::Normal}) {
    ManualClock clock;
    FakeBoard board;
    board.peers.push_back(peer(Priority::Low, clock.now));
    auto prio = source(own);
    PriorityGate gate(clock, counting_ops(), &board, &prio);
    for (int i = 0; i < 100000; ++i) {  // 1 s of launches every 10 us
      clock.now += 10 * kUs;
      board.peers[0].heartbeat_ns = clock.now;
      gate.gate(nullptr);
    }
    if (own == Priority::High) {
      EXPECT_EQ(board.reads, 0);
    } else {
      EXPECT_GE(board.reads, 9);
      EXPECT_LE(board.reads, 11);
    }
  }
}

TEST(PeerWatchThroughTheGate, StaleAndEqualOrLowerPeersDoNotHold) {
  ManualClock clock;
  FakeBoard board;
  const std::uint64_t stale = clock.now - PriorityTuning{}.stale_ns - 1;
  board.peers.push_back(peer(Priority::High, stale, clock.now + 500 * kMs));  // killed mid-burst
  board.peers.push_back(peer(Priority::Normal, clock.now, clock.now + 500 * kMs));
  board.peers.push_back(peer(Priority::Low, clock.now, clock.now + 500 * kMs));
  auto prio = source(Priority::Normal);
  PriorityGate gate(clock, counting_ops(), &board, &prio);
  const std::uint64_t start = clock.now;
  for (int i = 0; i < 100; ++i) gate.gate(nullptr);
  EXPECT_EQ(clock.now, start);
  EXPECT_EQ(gate.stats().holds, 0U);
  EXPECT_EQ(g_syncs, 0) << "no live higher peer: no in-flight bound";
}

// A peer that published a claim of being busy for hours and then went silent holds others no
// longer than an honest peer's one publish could (a sync lease plus a horizon), even where records
// stay fresh for longer than that. A peer that keeps publishing is indistinguishable from an honest
// busy one: there the floor applies.
TEST(PeerWatchThroughTheGate, APeerClaimingBusyForHoursHoldsNoLongerThanOneLease) {
  ManualClock clock;
  FakeBoard board;
  board.peers.push_back(peer(Priority::High, clock.now, clock.now + 3'600'000 * kMs));
  auto prio = source(Priority::Low);
  PriorityTuning tuning;
  tuning.floor_percent = 0;
  tuning.stale_ns = 3'600'000 * kMs;
  PriorityGate gate(clock, counting_ops(), &board, &prio, tuning);
  const std::uint64_t start = clock.now;
  gate.gate(nullptr);
  EXPECT_GE(clock.now - start, tuning.sync_lease_ns);
  EXPECT_LE(clock.now - start, tuning.sync_lease_ns + tuning.busy_horizon_ns + tuning.refresh_ns);
}

// The watch on its own, with the gate's default timing and a light share of 10%.
class PeerWatchAlone : public ::testing::Test {
 protected:
  static constexpr PeerWatch::Timing kTiming{.refresh_ns = 250 * kUs,
                                             .absent_refresh_ns = 100 * kMs,
                                             .stale_ns = 500 * kMs,
                                             .max_claim_ns = 1'010 * kMs,
                                             .light_share_permille = 100};

  std::uint64_t now = 1'000 * kMs;
  FakeBoard board;
  PeerWatch watch{&board, kTiming};
};

TEST_F(PeerWatchAlone, AFullLookSummarisesOnlyTheFreshRecordsAboveItsOwnLevel) {
  board.peers.push_back(peer(Priority::High, now, now + 5 * kMs));
  board.peers.back().busy_period_ns = 3 * kMs;
  board.peers.push_back(peer(Priority::High, now - kTiming.stale_ns - 1, now + 50 * kMs));  // stale
  board.peers.push_back(peer(Priority::Normal, now, now + 70 * kMs));                       // equal
  board.peers.push_back(peer(Priority::Low, now, now + 90 * kMs));                          // below
  const PeerWatch::Summary summary = watch.look(now, false, Priority::Normal);
  EXPECT_TRUE(summary.higher_present);
  EXPECT_EQ(summary.higher_busy_until_ns, now + 5 * kMs);
  EXPECT_EQ(summary.higher_period_ns, 3 * kMs);
  EXPECT_EQ(watch.higher_busy_until_ns(), now + 5 * kMs) << "kept for the gate's bound";
  EXPECT_EQ(watch.higher_period_ns(), 3 * kMs);
  EXPECT_EQ(watch.scans(), 1U);
  EXPECT_EQ(watch.rereads(), 0U);
  const PeerWatch::Summary high = watch.look(now, true, Priority::High);
  EXPECT_FALSE(high.higher_present) << "nobody above High";
  EXPECT_EQ(high.higher_busy_until_ns, 0U);
}

TEST_F(PeerWatchAlone, BetweenFullLooksOnlyTheKnownHigherRecordsAreReReadEachRefresh) {
  board.peers.push_back(peer(Priority::High, now, now + 5 * kMs));
  const std::uint64_t start = now;
  watch.look(now, false, Priority::Low);
  ASSERT_EQ(board.reads, 1);
  board.peers[0].busy_until_ns = now + 7 * kMs;  // not seen until the next re-read
  EXPECT_EQ(watch.look(now + 100 * kUs, false, Priority::Low).higher_busy_until_ns, start + 5 * kMs)
      << "not due: the last summary";
  EXPECT_EQ(board.reads + board.rereads, 1);
  EXPECT_EQ(watch.look(now + 100 * kUs, true, Priority::Low).higher_busy_until_ns, start + 7 * kMs)
      << "forced: re-read";
  EXPECT_EQ(board.rereads, 1);
  watch.look(now + 100 * kUs + kTiming.refresh_ns, false, Priority::Low);
  EXPECT_EQ(board.rereads, 2) << "due a refresh later";
  EXPECT_EQ(board.reads, 1);
  watch.look(start + kTiming.absent_refresh_ns, false, Priority::Low);
  EXPECT_EQ(board.reads, 2) << "a full look every absent_refresh_ns";
  EXPECT_EQ(watch.scans(), 2U);
  EXPECT_EQ(watch.rereads(), 2U);
}

TEST_F(PeerWatchAlone, WithNobodyAboveNothingIsReadUntilTheNextFullLook) {
  board.peers.push_back(peer(Priority::Low, now, now + 5 * kMs));
  EXPECT_FALSE(watch.look(now, false, Priority::Normal).higher_present);
  for (std::uint64_t t = now; t < now + kTiming.absent_refresh_ns; t += kTiming.refresh_ns)
    watch.look(t, false, Priority::Normal);
  EXPECT_EQ(board.reads, 1);
  EXPECT_EQ(board.rereads, 0);
  board.peers.push_back(peer(Priority::High, now, now + 500 * kMs));
  EXPECT_TRUE(watch.look(now + kTiming.absent_refresh_ns, false, Priority::Normal).higher_present);
  EXPECT_EQ(board.reads, 2);
}

// An honest peer never claims more than one sync lease plus a horizon (max_claim_ns) past its
// publish, which is not in the future.
TEST_F(PeerWatchAlone, ABusyClaimIsCutAtWhatOnePublishCanSay) {
  const std::uint64_t published = now - 3 * kMs;
  board.peers.push_back(peer(Priority::High, published, now + 3'600'000 * kMs));
  EXPECT_EQ(watch.look(now, false, Priority::Low).higher_busy_until_ns, published + kTiming.max_claim_ns);
  board.peers[0].heartbeat_ns = now + 60'000 * kMs;  // a publish "from the future"
  EXPECT_EQ(watch.look(now, true, Priority::Low).higher_busy_until_ns, now + kTiming.max_claim_ns);
}

// A higher one whose measured device share is below the light share is present (lower ones keep
// their bound beside it) but neither holds nor sizes the bound; an unmeasured share (0) holds.
TEST_F(PeerWatchAlone, ALightHigherOneIsPresentButDoesNotHold) {
  board.peers.push_back(peer(Priority::High, now, now + 5 * kMs));
  board.peers[0].busy_period_ns = 2 * kMs;
  board.peers[0].device_share_permille = 99;
  PeerWatch::Summary summary = watch.look(now, false, Priority::Low);
  EXPECT_TRUE(summary.higher_present);
  EXPECT_EQ(summary.higher_busy_until_ns, 0U);
  EXPECT_EQ(summary.higher_period_ns, 0U);
  for (const std::uint32_t share : {0U, 100U, 1000U}) {
    board.peers[0].device_share_permille = share;
    summary = watch.look(now, true, Priority::Low);
    EXPECT_EQ(summary.higher_busy_until_ns, now + 5 * kMs) << share;
    EXPECT_EQ(summary.higher_period_ns, 2 * kMs) << share;
  }
}

TEST_F(PeerWatchAlone, TheLatestBusyTimeAndTheShortestKnownPeriodOfTheHigherOnesAreKept) {
  board.peers.push_back(peer(Priority::High, now, now + 5 * kMs));
  board.peers.push_back(peer(Priority::Normal, now, now + 9 * kMs));
  board.peers.push_back(peer(Priority::High, now, now - 1 * kMs));  // idle since
  board.peers[0].busy_period_ns = 7 * kMs;
  board.peers[1].busy_period_ns = 2 * kMs;
  const PeerWatch::Summary summary = watch.look(now, false, Priority::Low);
  EXPECT_EQ(summary.higher_busy_until_ns, now + 9 * kMs);
  EXPECT_EQ(summary.higher_period_ns, 2 * kMs) << "an unknown period (0) is not the shortest";
}

TEST(PeerWatchWithoutABoard, SaysNobodyIsAboveAndReadsNothing) {
  PeerWatch watch(
      nullptr,
      {.refresh_ns = 1, .absent_refresh_ns = 1, .stale_ns = 1, .max_claim_ns = 1, .light_share_permille = 0});
  const PeerWatch::Summary summary = watch.look(1'000 * kMs, true, Priority::Low);
  EXPECT_FALSE(summary.higher_present);
  EXPECT_EQ(summary.higher_busy_until_ns, 0U);
  EXPECT_EQ(watch.scans() + watch.rereads(), 0U);
}

}  // namespace
}  // namespace gpuslice::limiter
