// PriorityFloor (priority_floor.h), the minimum share of admission time for a lower priority whose
// higher peers never idle: through the gate, as a held container meets it, then on its own.
#include "limiter/priority_floor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "fake_device.h"
#include "gate_fixture.h"
#include "limiter/priority_gate.h"

namespace gpuslice::limiter {
namespace {

// The floor is for a container held nearly all the time. One held half of the time (a server at
// 50% load) is admitted far longer than floor_percent, including while it launches nothing (its own
// host work, its own waits): that time spends the credit, so it never gets a slice in the middle of
// the higher one's work.
TEST(PriorityFloorThroughTheGate, ALowContainerHeldHalfTheTimeNeverGetsAFloorSlice) {
  ManualClock clock;
  FakeBoard board;
  board.peers.push_back(peer(Priority::High, clock.now));
  auto prio = source(Priority::Low);
  PriorityGate gate(clock, counting_ops(), &board, &prio);
  for (int cycle = 0; cycle < 500; ++cycle) {  // 5 s
    board.peers[0].heartbeat_ns = clock.now;
    board.peers[0].busy_until_ns = clock.now + 5 * kMs;  // the higher one serves for 5 ms
    gate.gate(nullptr);                                  // one launch, held until then
    clock.now += 5 * kMs;                                // then host work, no launch
  }
  EXPECT_GE(gate.stats().holds, 450U);
  EXPECT_EQ(gate.stats().floor_slices, 0U);
}

// Each floor slice is logged at debug level with the gate's clock, so that a benchmark can place it
// against a tail of the higher one's latencies (bench/gpu/priority_bench.py reads these lines).
TEST(PriorityFloorThroughTheGate, EachFloorSliceIsLoggedAtDebugLevelWithItsTime) {
  ManualClock clock;
  FakeBoard board;
  board.peers.push_back(peer(Priority::High, clock.now));
  auto prio = source(Priority::Low);
  PriorityGate gate(clock, counting_ops(), &board, &prio);
  std::vector<std::uint64_t> granted_at;
  const std::string err = stderr_at_debug([&] {
    for (int i = 0; i < 5000 && granted_at.size() < 2; ++i) {  // the higher one never idles
      board.peers[0].heartbeat_ns = clock.now;
      board.peers[0].busy_until_ns = clock.now + 20 * kMs;
      const std::uint64_t before = gate.stats().floor_slices;
      gate.gate(nullptr);
      if (gate.stats().floor_slices != before) granted_at.push_back(clock.now);
      clock.now += 10 * kUs;
    }
  });
  ASSERT_EQ(granted_at.size(), 2U);
  for (const std::uint64_t t : granted_at) {
    EXPECT_NE(err.find("priority gate: floor slice at " + std::to_string(t / kUs) + " us"), std::string::npos)
        << err;
  }
}

// The floor on its own (priority_floor.h): a held thread gets a slice only after a window of
// holding, then one every slice / percent; a floor of 0 never admits.
TEST(PriorityFloorPolicy, ASliceComesOnlyAfterAWindowOfHoldingThenEverySliceOverPercent) {
  PriorityFloor floor(5, 1000 * kMs, 5 * kMs);
  const std::uint64_t start = 1'000 * kMs;
  int admitted = 0;  // launches admitted while held
  std::uint64_t first = 0;
  for (std::uint64_t t = start; t < start + 3000 * kMs; t += kMs) {
    if (floor.admits(t, start, true)) {
      ++admitted;
      if (first == 0) first = t;
    }
  }
  EXPECT_GE(first, start + 1000 * kMs);
  EXPECT_GT(floor.slices(), 0u);
  // About 5% of the two seconds after the first window: 100 ms of 5 ms slices, some 20 of them.
  EXPECT_GE(floor.slices(), 15u);
  EXPECT_LE(floor.slices(), 25u);
  PriorityFloor strict(0, 1000 * kMs, 5 * kMs);
  for (std::uint64_t t = start; t < start + 3000 * kMs; t += kMs) EXPECT_FALSE(strict.admits(t, start, true));
}

// After a slice is granted, every thread is admitted until it ends, without another slice; the next
// one needs the credit of slice / percent more holding.
TEST(PriorityFloorPolicy, AnOpenSliceAdmitsEveryThreadUntilItEnds) {
  PriorityFloor floor(5, 1000 * kMs, 5 * kMs);
  const std::uint64_t start = 1'000 * kMs;
  const std::uint64_t granted = start + 1000 * kMs;
  ASSERT_FALSE(floor.admits(granted - 1 * kMs, start, true));
  ASSERT_TRUE(floor.admits(granted, start, true)) << "a window of holding";
  EXPECT_TRUE(floor.admits(granted + 5 * kMs - 1, granted, true)) << "another thread, in the slice";
  EXPECT_TRUE(floor.admits(granted + 1 * kMs, granted + 1 * kMs, false))
      << "an admitted launch, in the slice";
  EXPECT_EQ(floor.slices(), 1U);
  EXPECT_FALSE(floor.admits(granted + 5 * kMs, granted + 5 * kMs, true)) << "the slice is over";
  std::uint64_t next = 0;
  for (std::uint64_t t = granted + 5 * kMs; next == 0 && t < granted + 1000 * kMs; t += kMs) {
    if (floor.admits(t, granted + 5 * kMs, true)) next = t;
  }
  EXPECT_EQ(floor.slices(), 2U);
  EXPECT_GE(next, granted + 99 * kMs) << "slice / percent after the first";
  EXPECT_LE(next, granted + 101 * kMs);
}

// Time admitted (launching, or not launching at all) spends the credit a hold earned, at the rest
// of the time (95% here): a container held 900 ms, then admitted 100 ms, has none left.
TEST(PriorityFloorPolicy, TimeAdmittedSpendsTheCreditAHoldEarned) {
  const std::uint64_t start = 1'000 * kMs;
  PriorityFloor held_through(5, 1000 * kMs, 5 * kMs);
  EXPECT_FALSE(held_through.admits(start + 900 * kMs, start, true));
  EXPECT_TRUE(held_through.admits(start + 1000 * kMs, start, true)) << "one window held throughout";
  PriorityFloor interrupted(5, 1000 * kMs, 5 * kMs);
  EXPECT_FALSE(interrupted.admits(start + 900 * kMs, start, true));
  EXPECT_FALSE(interrupted.admits(start + 1000 * kMs, start + 1000 * kMs, false));  // admitted 100 ms
  const std::uint64_t again = start + 1000 * kMs;
  EXPECT_FALSE(interrupted.admits(again + 900 * kMs, again, true)) << "the hold starts over";
  EXPECT_TRUE(interrupted.admits(again + 1000 * kMs, again, true));
  EXPECT_EQ(interrupted.slices(), 1U);
}

}  // namespace
}  // namespace gpuslice::limiter
