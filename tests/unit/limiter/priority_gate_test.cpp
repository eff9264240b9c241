// PriorityGate mechanics with a hand-driven clock: what it publishes and when, how a held thread
// resumes, the bound it sizes, and that it touches the driver only when bounded. How it reads and
// ignores the peers' records is peer_watch_test.cpp's; the floor, priority_floor_test.cpp's.
#include "limiter/priority_gate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "fake_device.h"
#include "gate_fixture.h"

namespace gpuslice::limiter {
namespace {

TEST(PriorityGateMechanics, BusyIsPublishedOnTheIdleToBusyTransitionAndRenewedOnlyByHalfHorizons) {
  ManualClock clock;
  FakeBoard board;
  board.peers.push_back(peer(Priority::Low, clock.now));
  auto prio = source(Priority::High);
  PriorityGate gate(clock, counting_ops(), &board, &prio);
  gate.gate(nullptr);
  ASSERT_EQ(board.published.size(), 1U) << "the first launch after idling publishes at once";
  EXPECT_EQ(board.published[0].busy_until_ns, clock.now + PriorityTuning{}.busy_horizon_ns);
  EXPECT_EQ(board.published[0].priority, Priority::High);
  for (int i = 0; i < 1000; ++i) {  // 10 ms of launches every 10 us
    clock.now += 10 * kUs;
    gate.gate(nullptr);
  }
  EXPECT_LE(board.published.size(), 3U) << "one renewal per half horizon";
  EXPECT_EQ(g_syncs, 0) << "nothing above High: no drain";
  // The application waits for its work: busy for the lease; the wait returns: idle at once.
  gate.note_sync_begin();
  EXPECT_EQ(board.published.back().busy_until_ns, clock.now + PriorityTuning{}.sync_lease_ns);
  clock.now += 3 * kMs;
  gate.note_host_sync();
  EXPECT_EQ(board.published.back().busy_until_ns, clock.now + PriorityTuning{}.resume_grace_ns)
      << "idle from the end of the grace: once past, the time it went idle";
}

// A high-priority server with two threads: one waits for its work while the other launches more.
// The wait's return must not publish idle (lower priorities would run in front of the new work).
TEST(PriorityGateMechanics, AHighSyncThatReturnsAfterAnotherThreadLaunchedKeepsTheRecordBusy) {
  ManualClock clock;
  FakeBoard board;
  auto prio = source(Priority::High);
  PriorityGate gate(clock, counting_ops(), &board, &prio);
  gate.gate(nullptr);
  clock.now += 1 * kMs;
  gate.note_sync_begin();
  clock.now += 1 * kMs;
  gate.gate(nullptr);  // the other thread
  clock.now += 1 * kMs;
  gate.note_host_sync();
  EXPECT_GT(board.published.back().busy_until_ns, clock.now);
  // With nothing launched during the wait, its return says idle at once.
  gate.note_sync_begin();
  clock.now += 1 * kMs;
  gate.note_host_sync();
  EXPECT_EQ(board.published.back().busy_until_ns, clock.now + PriorityTuning{}.resume_grace_ns);
}

// GPUSLICE_PRIORITY_GRACE: after its wait returns, a server still counts as busy for the grace, so
// its next request (already queued) starts before lower priorities slip work in front of it; a
// launch within the grace keeps it busy, and after the grace it is idle without another publish.
TEST(PriorityGateMechanics, AGraceKeepsTheRecordBusyForThatLongAfterTheWaitReturned) {
  ManualClock clock;
  FakeBoard board;
  auto prio = source(Priority::High);
  PriorityTuning tuning;
  tuning.resume_grace_ns = 1 * kMs;
  PriorityGate gate(clock, counting_ops(), &board, &prio, tuning);
  gate.gate(nullptr);
  gate.note_sync_begin();
  clock.now += 2 * kMs;
  gate.note_host_sync();
  EXPECT_EQ(board.published.back().busy_until_ns, clock.now + 1 * kMs);
  const std::size_t publishes = board.published.size();
  gate.note_sync_begin();  // an idle wait within the grace says nothing new
  gate.note_host_sync();
  EXPECT_EQ(board.published.size(), publishes);
  clock.now += 500 * kUs;
  gate.gate(nullptr);  // the next request: busy again, published at once
  EXPECT_EQ(board.published.back().busy_until_ns, clock.now + PriorityTuning{}.busy_horizon_ns);
}

// The lower side of the same rule: held while the grace runs, released when it ends.
TEST(PriorityGateMechanics, ALowContainerResumesOnlyWhenTheHighGraceHasPassed) {
  ManualClock clock;
  FakeBoard board;
  const std::uint64_t grace_end = clock.now + 2 * kMs;
  board.peers.push_back(peer(Priority::High, clock.now, grace_end));
  auto prio = source(Priority::Low);
  PriorityGate gate(clock, counting_ops(), &board, &prio);
  gate.gate(nullptr);
  EXPECT_GE(clock.now, grace_end);
  EXPECT_LT(clock.now, grace_end + PriorityTuning{}.held_poll_ns + 1);
  EXPECT_EQ(gate.stats().holds, 1U);
}

// A busy period runs from the first launch after idling to the wait that found the work done (one
// request of a server); its moving mean (1/4) is published for lower ones to size their bound by.
TEST(PriorityGateMechanics, EachBusyPeriodsLengthFeedsThePublishedMean) {
  ManualClock clock;
  FakeBoard board;
  auto prio = source(Priority::High);
  PriorityGate gate(clock, counting_ops(), &board, &prio);
  auto request = [&](std::uint64_t length) {
    gate.gate(nullptr);
    clock.now += length / 2;
    gate.gate(nullptr);  // a second launch of the same request starts nothing
    clock.now += length / 2;
    gate.note_sync_begin();
    gate.note_host_sync();
    clock.now += 20 * kMs;  // idle until the next one
  };
  request(2 * kMs);
  EXPECT_EQ(gate.busy_period_ns(), 2 * kMs);
  EXPECT_EQ(board.published.back().busy_period_ns, 2 * kMs);
  request(6 * kMs);
  EXPECT_EQ(gate.busy_period_ns(), 3 * kMs) << "3/4 of 2 ms and 1/4 of 6 ms";
  EXPECT_EQ(board.published.back().busy_period_ns, 3 * kMs) << "moved by more than 1/8: published at once";
  gate.note_sync_begin();  // a wait with nothing launched since ends no period
  gate.note_host_sync();
  EXPECT_EQ(gate.busy_period_ns(), 3 * kMs);
}

// A lower container with GPUSLICE_PRIORITY_REQUEST_SHARE=5 sizes its bound by the shortest request
// of the higher ones that hold: at most 5% of it, never below kMinRequestBoundNs nor above the whole
// bound.
TEST(PriorityGateMechanics, TheBoundIsAShareOfTheShortestHigherRequestWithinItsLimits) {
  ManualClock clock;
  FakeBoard board;
  board.peers.push_back(peer(Priority::High, clock.now));
  board.peers.push_back(peer(Priority::High, clock.now));
  auto prio = source(Priority::Low);
  PriorityTuning five = two_ms_bound();
  five.request_share_percent = 5;
  PriorityGate gate(clock, counting_ops(), &board, &prio, five);
  const auto bound_beside = [&](std::uint64_t first, std::uint64_t second) {
    board.peers[0].busy_period_ns = first;
    board.peers[1].busy_period_ns = second;
    clock.now += PriorityTuning{}.absent_refresh_ns;
    board.peers[0].heartbeat_ns = board.peers[1].heartbeat_ns = clock.now;
    gate.gate(nullptr);
    return gate.in_flight_bound_now();
  };
  EXPECT_EQ(bound_beside(0, 0), 2 * kMs) << "no request known: the whole bound";
  EXPECT_EQ(bound_beside(7 * kMs, 0), 350 * kUs);
  EXPECT_EQ(bound_beside(7 * kMs, 2 * kMs), 100 * kUs) << "the shortest one's";
  EXPECT_EQ(bound_beside(200 * kUs, 0), PriorityGate::kMinRequestBoundNs);
  EXPECT_EQ(bound_beside(100 * kMs, 0), 2 * kMs) << "never above the whole bound";
  PriorityGate whole(clock, counting_ops(), &board, &prio, two_ms_bound());
  whole.gate(nullptr);
  EXPECT_EQ(whole.in_flight_bound_now(), 2 * kMs) << "the default: no request share";
}

// A held thread re-reads the higher record every held_poll_ns (cheap: one read per record), so
// the best-effort container resumes within that of the higher one saying idle, not a full refresh.
TEST(PriorityGateMechanics, AHeldLowReacquiresWithinTheHeldPollAfterHighGoesIdle) {
  ManualClock clock;
  FakeBoard board;
  board.peers.push_back(peer(Priority::High, clock.now, clock.now + 1'000 * kMs));
  board.idle_from = clock.now + 3 * kMs + 130 * kUs;  // its sync returned
  auto prio = source(Priority::Low);
  PriorityTuning tuning;
  tuning.floor_percent = 0;
  PriorityGate gate(clock, counting_ops(), &board, &prio, tuning);
  gate.gate(nullptr);
  EXPECT_GE(clock.now, board.idle_from);
  EXPECT_LE(clock.now - board.idle_from, tuning.held_poll_ns);
  EXPECT_EQ(board.reads, 1) << "the hold re-reads the known record, it does not scan";
}

TEST(PriorityGateMechanics, ABusyHigherPeerHoldsUntilItsRecordSaysIdle) {
  ManualClock clock;
  FakeBoard board;
  board.peers.push_back(peer(Priority::High, clock.now, clock.now + 5 * kMs));
  auto prio = source(Priority::Normal);
  PriorityGate gate(clock, counting_ops(), &board, &prio);
  const std::uint64_t start = clock.now;
  gate.gate(nullptr);
  EXPECT_EQ(clock.now - start, 5 * kMs);
  EXPECT_EQ(gate.stats().held_back_ns, 5 * kMs);
  EXPECT_EQ(gate.stats().holds, 1U);
}

// GPUSLICE_MPS_PRIORITY=server: under MPS the server's client priority ranks the kernels, so the
// gate neither holds a lower container beside a busy higher one nor bounds what it queues, and
// still publishes its own record (a `normal` one is a higher one to somebody).
TEST(PriorityGateMechanics, AGateThatDoesNotHoldNeitherWaitsForABusyHigherOneNorDrains) {
  ManualClock clock;
  FakeBoard board;
  board.peers.push_back(peer(Priority::High, clock.now, clock.now + 1'000 * kMs));
  auto prio = source(Priority::Normal);
  PriorityTuning tuning;
  tuning.holds = false;
  PriorityGate gate(clock, counting_ops(), &board, &prio, tuning);
  const std::uint64_t start = clock.now;
  for (int i = 0; i < 1000; ++i) {
    clock.now += 10 * kUs;
    gate.gate(nullptr);
  }
  EXPECT_EQ(clock.now - start, 1000 * 10 * kUs) << "no launch waited";
  EXPECT_EQ(gate.stats().holds, 0U);
  EXPECT_EQ(g_syncs, 0) << "nothing bounded";
  ASSERT_FALSE(board.published.empty());
  EXPECT_GT(board.published.back().busy_until_ns, clock.now) << "its own record says busy";
}

TEST(PriorityGateMechanics, InFlightBoundDrainsAfterTheLearnedNumberOfLaunches) {
  ManualClock clock;
  FakeBoard board;
  board.peers.push_back(peer(Priority::High, clock.now));
  auto prio = source(Priority::Low);
  PriorityGate gate(clock, counting_ops(), &board, &prio, two_ms_bound());
  // Launches every 100 us: the cost of a launch is measured as 100 us, so the 2 ms bound allows
  // 20 launches between drains once learned.
  for (int i = 0; i < 2000; ++i) {
    clock.now += 100 * kUs;
    board.peers[0].heartbeat_ns = clock.now;
    gate.gate(nullptr);
  }
  EXPECT_GE(g_syncs, 95);
  EXPECT_LE(g_syncs, 110);
}

TEST(PriorityGateMechanics, EachHoldIsLoggedAtDebugLevelWithItsStartWhatWasQueuedAndItsEnd) {
  ManualClock clock;
  FakeBoard board;
  board.peers.push_back(peer(Priority::High, clock.now));  // alive, idle
  auto prio = source(Priority::Low);
  PriorityGate gate(clock, counting_ops(), &board, &prio);
  gate.gate(nullptr);  // one launch in the window, not held
  clock.now += kMs;    // past the records' next re-read
  board.peers[0].heartbeat_ns = clock.now;
  board.peers[0].busy_until_ns = clock.now + 3 * kMs;
  const std::uint64_t held_at = clock.now;
  const std::string err = stderr_at_debug([&] { gate.gate(nullptr); });
  ASSERT_EQ(gate.stats().holds, 1U);
  EXPECT_NE(
      err.find("priority gate: held at " + std::to_string(held_at / kUs) + " us, 1 launches in the window"),
      std::string::npos)
      << err;
  // Released once the record's busy time has passed (the clock moves by the held thread's naps).
  const std::size_t at = err.find("priority gate: released at ");
  ASSERT_NE(at, std::string::npos) << err;
  const std::uint64_t released_us =
      std::stoull(err.substr(at + std::string("priority gate: released at ").size()));
  EXPECT_GE(released_us, (held_at + 3 * kMs) / kUs);
  EXPECT_LE(released_us, (held_at + 3 * kMs + PriorityTuning{}.held_poll_ns) / kUs + 1);
}

// The ramp's tests: the whole 2 ms bound after 4 ms of the higher one's idle time. Records are
// re-read on their own only every 10 ms, so the reads seen are the ramp's.
class PriorityGateRamp : public ::testing::Test {
 protected:
  static constexpr std::uint64_t kRamp = 4 * kMs;

  PriorityGateRamp() {
    board.peers.push_back(peer(Priority::High, clock.now));  // alive, never busy
    PriorityTuning t = two_ms_bound();
    t.in_flight_ramp_ns = kRamp;
    t.refresh_ns = 10 * kMs;
    t.held_poll_ns = 100 * kUs;
    gate.emplace(clock, counting_ops(), &board, &prio, t);
    launch_for(200 * kMs);  // learns the cost of a launch: 100 us, so 20 launches per 2 ms
  }

  void launch_for(std::uint64_t span) {  // a launch every 100 us
    const std::uint64_t end = clock.now + span;
    while (clock.now < end) {
      clock.now += 100 * kUs;
      board.peers[0].heartbeat_ns = clock.now;
      gate->gate(nullptr);
    }
  }

  // The higher one serves a 20 ms request: a launch is held from the next refresh until its record
  // says idle.
  void higher_request() {
    board.peers[0].busy_until_ns = clock.now + 20 * kMs;
    const std::uint64_t holds = gate->stats().holds;
    for (int i = 0; i < 200 && gate->stats().holds == holds; ++i) launch_for(100 * kUs);
    ASSERT_EQ(gate->stats().holds, holds + 1);
    ASSERT_GE(clock.now, board.peers[0].busy_until_ns);
  }

  ManualClock clock;
  FakeBoard board;
  std::atomic<std::uint32_t> prio = source(Priority::Low);
  std::optional<PriorityGate> gate;
};

// Right after the higher one went idle its next request may come any moment, so the bound is in
// proportion to its idle time (the whole of it after in_flight_ramp_ns): more, smaller steps, each
// of which also re-reads its record. A higher one never busy gets the whole bound.
TEST_F(PriorityGateRamp, TheBoundGrowsWithTheHigherOnesIdleTimeAndEachStepLooksAtItsRecord) {
  g_syncs = 0;
  launch_for(kRamp);
  const int never_busy = g_syncs;
  higher_request();  // released: idle since its end
  g_syncs = 0;
  int rereads = board.rereads;
  launch_for(kRamp);
  const int ramping = g_syncs;
  const int ramp_rereads = board.rereads - rereads;
  g_syncs = 0;
  rereads = board.rereads;
  launch_for(kRamp);
  const int after = g_syncs;
  const int after_rereads = board.rereads - rereads;
  std::printf("drains per 4 ms: never busy %d, ramping %d, after %d; re-reads ramping %d, after %d\n",
              never_busy, ramping, after, ramp_rereads, after_rereads);
  EXPECT_LE(never_busy, 3) << "the whole bound: 40 launches of 100 us in two drains";
  EXPECT_LE(after, 3);
  EXPECT_GE(ramping, 3 * after) << "a bound of idle/4 ms x 2 ms: one launch per drain at first";
  EXPECT_GE(ramp_rereads, ramping - 1) << "each step of the ramp looks at the record";
  EXPECT_LE(after_rereads, 1) << "after the ramp, one re-read per refresh_ns (10 ms) only";
}

// A higher one whose record says busy again at a step of the ramp holds the launch there, long
// before the next refresh.
TEST_F(PriorityGateRamp, AHigherOneResumingDuringTheRampHoldsTheNextLaunchAtTheStep) {
  higher_request();
  launch_for(100 * kUs);  // a window of one launch: the next one steps
  const std::uint64_t holds = gate->stats().holds;
  board.peers[0].busy_until_ns = clock.now + 3 * kMs;  // its next request
  launch_for(100 * kUs);
  EXPECT_EQ(gate->stats().holds, holds + 1) << "the step's look saw it busy";
  EXPECT_GE(clock.now, board.peers[0].busy_until_ns);
}

// A loop beside an idle higher priority, from one thread: 50 us of host time per launch, kernels
// of 10 us four times then one of 360 us (80 us on average). Alone it keeps the device busy: the
// long kernels' queue covers the short ones' host time, so an empty queue (after a drain) costs
// device time. Even launches go to `stream`, odd ones to `odd` (the same stream unless given).
// Returns the device's busy share over the loop.
double launch_loop(ManualClock& clock, FakeDevice& device, FakeBoard& board, PriorityGate& gate, int n,
                   CUstream stream = nullptr, std::optional<CUstream> odd = std::nullopt) {
  const std::uint64_t from = clock.now;
  std::uint64_t busy = 0;
  for (int i = 0; i < n; ++i) {
    clock.now += 50 * kUs;
    board.peers[0].heartbeat_ns = clock.now;
    gate.gate(i % 2 == 1 ? odd.value_or(stream) : stream);
    const std::uint64_t kernel = i % 5 == 4 ? 360 * kUs : 10 * kUs;
    device.launch(kernel);
    busy += kernel;
  }
  clock.now += device.queued();
  return static_cast<double>(busy) / static_cast<double>(clock.now - from);
}

// A low-priority gate beside a high-priority container that stays idle, on the model device.
class PriorityGatePipelined : public ::testing::Test {
 protected:
  PriorityGatePipelined() { board.peers.push_back(peer(Priority::High, clock.now)); }
  PriorityGate& make_gate(const DriverOps& ops) {
    gate_.emplace(clock, ops, &board, &prio, two_ms_bound());
    return *gate_;
  }
  PriorityGate& make_gate() { return make_gate(device.ops()); }

  ManualClock clock;
  FakeBoard board;
  std::atomic<std::uint32_t> prio = source(Priority::Low);
  FakeDevice device{clock};
  std::optional<PriorityGate> gate_;
};

TEST_F(PriorityGatePipelined, StepsWaitForThePreviousHalfWindowsEventKeepingTheDeviceBusyAndTheBound) {
  PriorityGate& gate = make_gate();
  auto* stream = reinterpret_cast<CUstream>(0x10);
  const double busy = launch_loop(clock, device, board, gate, 5000, stream);
  EXPECT_EQ(device.ctx_syncs, 0) << "never a drain";
  EXPECT_GT(gate.stats().event_waits, 400U);
  EXPECT_EQ(gate.stats().drains, 0U);
  for (CUstream s : device.recorded_on) ASSERT_EQ(s, stream) << "events go on the launches' stream";
  // The cost is learnt from the events (80 us per launch): 2 ms is 25 launches, a step every 12.
  EXPECT_GE(device.records, 5000 / 13);
  EXPECT_LE(device.records, 5000 / 11);
  EXPECT_LE(device.max_queued, 2 * kMs + 360 * kUs)
      << "never more than the bound (plus the launch being made) in flight";
  std::printf("device busy with events: %.4f\n", busy);
  EXPECT_GT(busy, 0.99) << "the queue never runs dry at a step";
}

TEST_F(PriorityGatePipelined, WithoutEventsTheBoundDrainsAndTheDeviceIdlesAfterEachDrain) {
  DriverOps ops = device.ops();
  ops.event_record = nullptr;  // all or none
  PriorityGate& gate = make_gate(ops);
  const double busy = launch_loop(clock, device, board, gate, 5000);
  EXPECT_EQ(device.records, 0);
  EXPECT_GE(device.ctx_syncs, 5000 / 26);
  EXPECT_LE(device.max_queued, 2 * kMs + 360 * kUs);
  std::printf("device busy with drains: %.4f\n", busy);
  EXPECT_LT(busy, 0.98)
      << "the host's launch after each drain finds the device idle (the pipelined test's contrast)";
}

TEST_F(PriorityGatePipelined, MixedStreamsACaptureAnotherContextAndFailuresFallBackSafely) {
  PriorityGate& gate = make_gate();
  auto* a = reinterpret_cast<CUstream>(0x10);
  auto* b = reinterpret_cast<CUstream>(0x20);
  launch_loop(clock, device, board, gate, 200, a);  // learns the cost
  const int records = device.records;
  // Alternating streams: an event on one would not cover the other's work, so the steps drain.
  launch_loop(clock, device, board, gate, 200, a, b);
  EXPECT_EQ(device.records, records);
  EXPECT_GT(device.ctx_syncs, 5);
  EXPECT_LE(device.max_queued, 2 * kMs + 360 * kUs);
  // Another context current (or the events' one destroyed: its unique id never comes back): drains.
  device.ctx = 8;
  int syncs = device.ctx_syncs;
  launch_loop(clock, device, board, gate, 200, a);
  EXPECT_EQ(device.records, records);
  EXPECT_GT(device.ctx_syncs, syncs);
  // A stream being captured: neither an event nor a drain.
  device.ctx = 7;
  device.capturing = true;
  syncs = device.ctx_syncs;
  launch_loop(clock, device, board, gate, 200, a);
  EXPECT_EQ(device.records, records);
  EXPECT_EQ(device.ctx_syncs, syncs);
  // An event that fails: drains from then on.
  device.capturing = false;
  device.fail_sync = true;
  launch_loop(clock, device, board, gate, 200, a);
  const int records_after_failure = device.records;
  syncs = device.ctx_syncs;
  device.fail_sync = false;
  launch_loop(clock, device, board, gate, 200, a);
  EXPECT_EQ(device.records, records_after_failure) << "events stay off after a failure";
  EXPECT_GT(device.ctx_syncs, syncs);
}

// PyTorch's backward pass launches from its autograd thread on the stream the forward pass used from
// the main thread: windows mix two threads on one stream. That stream is one queue, so an event on
// it covers both threads' launches; the per-thread default stream is a queue per thread, so there a
// window of two threads still drains. (Before, any window of two threads drained.)
TEST_F(PriorityGatePipelined, WindowsOfTwoThreadsOnOneStreamStepWithEventsNotOnThePerThreadStream) {
  PriorityGate& gate = make_gate();
  auto* stream = reinterpret_cast<CUstream>(0x10);
  launch_loop(clock, device, board, gate, 200, stream);  // learns the cost
  int kernel_index = 0;
  // The two threads take turns every 3 launches (a window is about 12); one runs at a time.
  auto turns = [&](CUstream s, int n) {
    auto three = [&] {
      for (int i = 0; i < 3; ++i, ++kernel_index) {
        clock.now += 50 * kUs;
        board.peers[0].heartbeat_ns = clock.now;
        gate.gate(s);
        device.launch(kernel_index % 5 == 4 ? 360 * kUs : 10 * kUs);
      }
    };
    for (int k = 0; k < n / 3; ++k) {
      if (k % 2 == 0) {
        three();
      } else {
        std::thread other(three);
        other.join();
      }
    }
  };
  int records = device.records;
  int syncs = device.ctx_syncs;
  turns(stream, 600);
  EXPECT_EQ(device.ctx_syncs, syncs) << "one queue: no drain";
  EXPECT_GE(device.records, records + 600 / 13);
  EXPECT_LE(device.max_queued, 2 * kMs + 360 * kUs);
  for (CUstream s : device.recorded_on) ASSERT_EQ(s, stream);
  records = device.records;
  syncs = device.ctx_syncs;
  turns(CU_STREAM_PER_THREAD, 600);
  EXPECT_EQ(device.records, records) << "a queue per thread: an event would cover one of them";
  EXPECT_GE(device.ctx_syncs, syncs + 600 / 26);
  EXPECT_LE(device.max_queued, 2 * kMs + 360 * kUs);
}

// At debug level a hold also records an event behind the queue and the held thread polls it: the
// release line says how long the work queued before the hold took (what the higher priority met).
// Without debug logging nothing is recorded for it.
TEST_F(PriorityGatePipelined, AtDebugLevelAHoldMeasuresHowLongTheQueueBeforeItTook) {
  PriorityGate& gate = make_gate();
  auto* stream = reinterpret_cast<CUstream>(0x10);
  launch_loop(clock, device, board, gate, 500, stream);
  for (int i = 0; i < 4; ++i) {  // a few more, so that work is queued when the higher one arrives
    clock.now += 50 * kUs;
    board.peers[0].heartbeat_ns = clock.now;
    gate.gate(stream);
    device.launch(360 * kUs);
  }
  const int records = device.records;
  auto hold = [&] {
    clock.now += 300 * kUs;  // past the records' next re-read (every 250 us)
    board.peers[0].heartbeat_ns = clock.now;
    board.peers[0].busy_until_ns = clock.now + 5 * kMs;
    gate.gate(stream);
  };
  hold();
  EXPECT_EQ(device.records, records) << "no probe without debug logging";
  for (int i = 0; i < 6; ++i) {
    clock.now += 50 * kUs;
    gate.gate(stream);
    device.launch(360 * kUs);
  }
  // What will be queued at the hold below.
  const std::uint64_t queued = device.queued() > 300 * kUs ? device.queued() - 300 * kUs : 0;
  const int records_before = device.records;
  const std::string err = stderr_at_debug(hold);
  ASSERT_GT(queued, 0U);
  EXPECT_EQ(device.records, records_before + 1) << "one probe";
  const std::string key = "queued work done ";
  const std::size_t at = err.find(key);
  ASSERT_NE(at, std::string::npos) << err;
  const std::uint64_t done_us = std::stoull(err.substr(at + key.size()));
  std::printf("queued at the hold: %llu us, measured %llu us\n",
              static_cast<unsigned long long>(queued / kUs), static_cast<unsigned long long>(done_us));
  EXPECT_GE(done_us, queued / kUs);
  EXPECT_LE(done_us, (queued + PriorityTuning{}.held_poll_ns) / kUs + 1);  // found by the next poll
}

// A training step's shape: 200 kernels of 10 us, then a cluster of 8 of `heavy_ns` (5 us of host
// time each), 300 times. Returns the most device time queued once the costs are learnt, and the
// device's busy share over the loop.
std::pair<std::uint64_t, double> most_queued_with_a_cluster(ManualClock& clock, FakeDevice& device,
                                                            FakeBoard& board, PriorityGate& gate,
                                                            std::uint64_t heavy_ns = 800 * kUs) {
  auto* stream = reinterpret_cast<CUstream>(0x10);
  std::uint64_t most = 0;
  const std::uint64_t from = clock.now;
  clock.now += device.queued();
  for (int step = 0; step < 300; ++step) {
    for (int i = 0; i < 208; ++i) {
      clock.now += 5 * kUs;
      board.peers[0].heartbeat_ns = clock.now;
      const bool heavy = i >= 200;
      gate.gate(stream, heavy ? 0xbeef : 0xf00d);  // two kernels (function and grid)
      device.launch(heavy ? heavy_ns : 10 * kUs);
      if (step >= 50) most = std::max(most, device.queued());
    }
  }
  clock.now += device.queued();
  return {most,
          300.0 * static_cast<double>(kUs * 200 * 10 + 8 * heavy_ns) / static_cast<double>(clock.now - from)};
}

// With costs per kernel the cluster closes windows early: never more than the bound and the one
// kernel that closes a window in flight. With the average cost of a launch (the bound before
// 2026-11-26, GPUSLICE_PRIORITY_COST=average) the cluster goes into one window: over three times
// the bound (docs/priority.md, "Limits of the approach").
TEST_F(PriorityGatePipelined, AClusterOfHeavyKernelsStaysWithinTheBoundWithCostsPerKernel) {
  PriorityTuning tuning = two_ms_bound();
  gate_.emplace(clock, device.ops(), &board, &prio, tuning);
  const auto [per_kernel, per_kernel_busy] = most_queued_with_a_cluster(clock, device, board, *gate_);
  const std::uint64_t waits = gate_->stats().event_waits;
  tuning.per_kernel_cost = false;
  gate_.emplace(clock, device.ops(), &board, &prio, tuning);
  const auto [average, average_busy] = most_queued_with_a_cluster(clock, device, board, *gate_);
  std::printf(
      "most queued under a 2 ms bound: %.2f ms with costs per kernel (%llu event waits, device busy %.4f), "
      "%.2f ms with the average (%llu, %.4f)\n",
      static_cast<double>(per_kernel) / 1e6, static_cast<unsigned long long>(waits), per_kernel_busy,
      static_cast<double>(average) / 1e6, static_cast<unsigned long long>(gate_->stats().event_waits),
      average_busy);
  EXPECT_LE(per_kernel, 2 * kMs + 800 * kUs);
  EXPECT_GT(average, kMs * 3 * 2);
  EXPECT_GT(per_kernel_busy, 0.99) << "the smaller windows of the cluster still keep the device busy";
}

// Kernels longer than half the bound (a cluster of 8 of 1.5 ms under 2 ms): queued behind the
// window before them, two are in flight at once (3 ms, which a higher priority's request waits for
// in full, time-sliced with it); launched alone, one of them and the window after it at most. The
// short kernels never go alone, the ramp's smaller bound notwithstanding. (The model's host wakes at
// once after a wait, so the device's idling before each long kernel shows on the GPU only.)
TEST_F(PriorityGatePipelined, KernelsLongerThanHalfTheBoundGoAloneSoTwoAreNeverInFlight) {
  PriorityTuning tuning = two_ms_bound();
  EXPECT_FALSE(tuning.long_kernels_alone) << "the default";
  tuning.long_kernels_alone = true;
  gate_.emplace(clock, device.ops(), &board, &prio, tuning);
  const std::uint64_t heavy = 1500 * kUs;
  const std::uint64_t alone = most_queued_with_a_cluster(clock, device, board, *gate_, heavy).first;
  const PriorityStats stats = gate_->stats();
  tuning.long_kernels_alone = false;
  gate_.emplace(clock, device.ops(), &board, &prio, tuning);
  const std::uint64_t queued = most_queued_with_a_cluster(clock, device, board, *gate_, heavy).first;
  std::printf(
      "most queued under a 2 ms bound with 1.5 ms kernels: %.2f ms alone (%llu launched alone), "
      "%.2f ms queued (%llu)\n",
      static_cast<double>(alone) / 1e6, static_cast<unsigned long long>(stats.long_kernels),
      static_cast<double>(queued) / 1e6, static_cast<unsigned long long>(gate_->stats().long_kernels));
  EXPECT_LE(alone, heavy + 1 * kMs) << "one long kernel and half the bound after it";
  EXPECT_GE(queued, 2 * heavy) << "two long kernels";
  EXPECT_GE(stats.long_kernels, 8U * 250) << "every long kernel once its cost is learnt";
  EXPECT_LE(stats.long_kernels, 8U * 300) << "and no short one";
  EXPECT_EQ(gate_->stats().long_kernels, 0U);
}

TEST_F(PriorityGatePipelined, EventsThatCannotBeCreatedLeaveTheDrains) {
  device.fail_create = true;
  PriorityGate& gate = make_gate();
  launch_loop(clock, device, board, gate, 1000);
  EXPECT_EQ(device.records, 0);
  EXPECT_GE(device.ctx_syncs, 1000 / 26);
  EXPECT_LE(device.max_queued, 2 * kMs + 360 * kUs);
}

TEST(PriorityGateMechanics, SettlePublishesIdleAndHeartbeatCarriesALivePriorityChange) {
  ManualClock clock;
  FakeBoard board;
  auto prio = source(Priority::High);
  PriorityGate gate(clock, counting_ops(), &board, &prio);
  gate.gate(nullptr);
  prio.store(static_cast<std::uint32_t>(Priority::Low));
  clock.now += 100 * kMs;
  gate.heartbeat();
  EXPECT_EQ(board.published.back().priority, Priority::Low);
  EXPECT_EQ(board.published.back().heartbeat_ns, clock.now);
  prio.store(static_cast<std::uint32_t>(Priority::High));
  gate.gate(nullptr);
  gate.settle();
  EXPECT_EQ(board.published.back().busy_until_ns, 0U);
}

}  // namespace
}  // namespace gpuslice::limiter
