// Direct tests of ComputeLimiter mechanics with a hand-driven clock and counting driver stubs:
// the unlimited fast path, stream capture, settle(), the union charge of overlapping processes,
// the token bucket's burst cap, and statistics.
#include "limiter/compute_limiter.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>

#include "shared_state/compute_shared.h"

namespace gpuslice::limiter {
namespace {

constexpr std::uint64_t kMs = 1'000'000;

// Time moves only when told to, or when the limiter sleeps.
class ManualClock final : public Clock {
 public:
  std::uint64_t now_ns() override {
    ++reads;
    return now;
  }
  void sleep_ns(std::uint64_t ns) override {
    slept += ns;
    now += ns;
  }
  std::uint64_t now = 1'000 * kMs;
  std::uint64_t slept = 0;
  int reads = 0;
};

// Driver stubs: count calls; a synchronize may take time (a busy device) through the clock.
struct Stubs {
  static inline int synchronizes = 0;
  static inline int capture_queries = 0;
  static inline int capture_status = 0;
  static inline std::uint64_t drain_ns = 0;
  static inline ManualClock* clock = nullptr;

  static CUresult ctx_synchronize() {
    ++synchronizes;
    if (clock != nullptr) clock->now += drain_ns;
    return CUDA_SUCCESS;
  }
  static CUresult is_capturing(CUstream, int* status) {
    ++capture_queries;
    *status = capture_status;
    return CUDA_SUCCESS;
  }
  static void reset(ManualClock* c) {
    synchronizes = 0;
    capture_queries = 0;
    capture_status = 0;
    drain_ns = 0;
    clock = c;
  }
};

DriverOps stub_ops() {
  DriverOps ops;
  ops.ctx_synchronize = &Stubs::ctx_synchronize;
  ops.stream_is_capturing = &Stubs::is_capturing;
  return ops;
}

// Timing events on a device that runs each kernel for `kernel_ns` as soon as it is launched (an
// idle device): a "before" event completes at the launch, an "after" one a kernel later. The
// limiter records them in that order, so odd records are "after" events.
struct EventStubs {
  static inline std::uint64_t kernel_ns = 0;
  static inline std::uint64_t times[1024] = {};
  static inline int created = 0;
  static inline int records = 0;
  static inline int elapsed_reads = 0;
  static inline bool fail_records = false;

  static int id(CUevent event) { return static_cast<int>(reinterpret_cast<std::uintptr_t>(event)) - 1; }
  static CUresult create(CUevent* event) {
    *event = reinterpret_cast<CUevent>(static_cast<std::uintptr_t>(++created));
    return CUDA_SUCCESS;
  }
  // Each stream runs in order: a pair's `before` completes when the stream's earlier work did (or at
  // once), its `after` one kernel later. Streams are told apart by their handle (up to kStreams).
  static constexpr int kStreams = 4;
  static inline std::uint64_t free_at[kStreams] = {};
  static inline std::uint64_t pair_begin[kStreams] = {};
  static int lane(CUstream stream) {
    return static_cast<int>(reinterpret_cast<std::uintptr_t>(stream) % kStreams);
  }
  static CUresult record(CUevent event, CUstream stream) {
    if (fail_records) return CUDA_ERROR_INVALID_HANDLE;
    const int l = lane(stream);
    if (records++ % 2 == 0) {
      pair_begin[l] = std::max(Stubs::clock->now, free_at[l]);
      times[id(event)] = pair_begin[l];
    } else {
      times[id(event)] = free_at[l] = pair_begin[l] + kernel_ns;
    }
    return CUDA_SUCCESS;
  }
  // As the driver: never negative (an event that completed first reads 0).
  static CUresult elapsed(CUevent start, CUevent end, std::uint64_t* ns) {
    ++elapsed_reads;
    *ns = times[id(end)] > times[id(start)] ? times[id(end)] - times[id(start)] : 0;
    return CUDA_SUCCESS;
  }
  static void reset() {
    kernel_ns = 0;
    created = 0;
    records = 0;
    elapsed_reads = 0;
    fail_records = false;
    for (int l = 0; l < kStreams; ++l) free_at[l] = pair_begin[l] = 0;
  }
};

DriverOps event_ops() {
  DriverOps ops = stub_ops();
  ops.event_create = &EventStubs::create;
  ops.event_record = &EventStubs::record;
  ops.event_elapsed_ns = &EventStubs::elapsed;
  return ops;
}

// A launch as the hooks make it.
void launch(ComputeLimiter& limiter, CUstream stream = nullptr) {
  if (limiter.gate(stream)) limiter.after_launch(stream);
}

class LimiterMechanics : public ::testing::Test {
 protected:
  void SetUp() override {
    Stubs::reset(&clock);
    EventStubs::reset();
  }
  ManualClock clock;
  shm::ComputeShared shared{};
  std::atomic<unsigned> limit{0};
};

TEST_F(LimiterMechanics, UnlimitedGateReadsNoClockAndCallsNoDriver) {
  ComputeLimiter limiter(clock, stub_ops(), &shared, &limit);
  for (unsigned value : {0u, 100u}) {
    limit.store(value);
    for (int i = 0; i < 1000; ++i) limiter.gate(nullptr);
  }
  EXPECT_EQ(clock.reads, 0);
  EXPECT_EQ(Stubs::synchronizes, 0);
  EXPECT_EQ(Stubs::capture_queries, 0);
  EXPECT_EQ(shared.busy_total_ns.load(), 0u);
  EXPECT_EQ(limiter.stats().windows, 0u);
}

TEST_F(LimiterMechanics, NullLimitSourceMeansUnlimited) {
  ComputeLimiter limiter(clock, stub_ops(), &shared, nullptr);
  limiter.gate(nullptr);
  EXPECT_EQ(limiter.limit_percent(), 0u);
  EXPECT_EQ(clock.reads, 0);
}

TEST_F(LimiterMechanics, PauseWithoutHostSyncIsChargedUpToOneWindow) {
  limit.store(50);
  const std::uint64_t window = Tuning{}.period_ns / 2;
  ComputeLimiter limiter(clock, stub_ops(), &shared, &limit);
  limiter.gate(nullptr);  // opens a window
  clock.now += 30 * kMs;
  limiter.gate(nullptr);              // 30 ms without a launch: the window ends
  EXPECT_EQ(Stubs::synchronizes, 2);  // the first window's drain before it opens, and this one
  // The drain found the device idle and no host sync says since when: the pause counts as busy.
  EXPECT_EQ(shared.busy_total_ns.load(), 30 * kMs);
  EXPECT_EQ(limiter.stats().busy_ns, 30 * kMs);
  EXPECT_EQ(limiter.stats().windows, 1u);
  // The launch after the pause opened the next window at once, for the rest of the on part
  // (window - 30 ms): the debt of this on part does not hold it back.
  EXPECT_EQ(limiter.stats().throttled_ns, 0u);
  clock.now += window + 400 * kMs;
  limiter.gate(nullptr);  // but a pause is never charged beyond its window's budget
  EXPECT_EQ(shared.busy_total_ns.load(), window);
}

TEST_F(LimiterMechanics, HostSyncTellsWhenTheDeviceWentIdle) {
  limit.store(50);
  ComputeLimiter limiter(clock, stub_ops(), &shared, &limit);
  limiter.gate(nullptr);
  clock.now += 4 * kMs;
  limiter.note_host_sync();  // the application waited for its work: done at +4 ms
  clock.now += 40 * kMs;     // then a CPU phase
  limiter.gate(nullptr);
  EXPECT_EQ(shared.busy_total_ns.load(), 4 * kMs);
}

TEST_F(LimiterMechanics, DrainThatWaitsChargesUntilTheDeviceIsIdle) {
  limit.store(50);
  ComputeLimiter limiter(clock, stub_ops(), &shared, &limit);
  limiter.gate(nullptr);
  clock.now += 10 * kMs;
  Stubs::drain_ns = 7 * kMs;  // queued work still running when the pause is noticed
  limiter.gate(nullptr);
  EXPECT_EQ(shared.busy_total_ns.load(), 17 * kMs);
}

TEST_F(LimiterMechanics, LongPauseIsChargedAtMostOneWindowEvenIfTheDrainLooksBusy) {
  limit.store(50);
  const std::uint64_t window = Tuning{}.period_ns / 2;
  ComputeLimiter limiter(clock, stub_ops(), &shared, &limit);
  limiter.gate(nullptr);
  clock.now += 2'000 * kMs;   // the application idles for 2 s without a host sync
  Stubs::drain_ns = 100'000;  // and the drain is slow (the OS descheduled the thread)
  limiter.gate(nullptr);
  EXPECT_EQ(shared.busy_total_ns.load(), window + 100'000);
}

TEST_F(LimiterMechanics, CapturingStreamIsNeverDrained) {
  limit.store(20);
  ComputeLimiter limiter(clock, stub_ops(), &shared, &limit);
  Stubs::capture_status = 1;  // CU_STREAM_CAPTURE_STATUS_ACTIVE
  for (int i = 0; i < 200; ++i) {
    limiter.gate(nullptr);
    clock.now += kMs;
  }
  EXPECT_EQ(Stubs::synchronizes, 0);
  EXPECT_GT(Stubs::capture_queries, 0);
  EXPECT_EQ(shared.busy_total_ns.load(), 0u);
  Stubs::capture_status = 0;
  for (int i = 0; i < 200; ++i) {
    limiter.gate(nullptr);
    clock.now += 100'000;
  }
  EXPECT_GT(Stubs::synchronizes, 0);
}

TEST_F(LimiterMechanics, SettleChargesTheOpenWindowWithoutSleeping) {
  limit.store(30);
  ComputeLimiter limiter(clock, stub_ops(), &shared, &limit);
  limiter.gate(nullptr);
  clock.now += 500'000;
  Stubs::drain_ns = 2 * kMs;
  limiter.settle();
  EXPECT_EQ(shared.busy_total_ns.load(), 2'500'000u);
  EXPECT_EQ(Stubs::synchronizes, 2);  // before the first window opened, and the settle
  EXPECT_EQ(clock.slept, 0u);
  limiter.settle();  // nothing open any more
  EXPECT_EQ(Stubs::synchronizes, 2);
}

TEST_F(LimiterMechanics, SettleAfterALongIdlePauseChargesOnlyThePauseRules) {
  limit.store(30);
  ComputeLimiter limiter(clock, stub_ops(), &shared, &limit);
  limiter.gate(nullptr);
  clock.now += 3 * kMs;
  limiter.note_host_sync();
  clock.now += 600'000 * kMs;  // idle for ten minutes, then the process exits
  limiter.settle();
  EXPECT_EQ(shared.busy_total_ns.load(), 3 * kMs);
}

TEST_F(LimiterMechanics, OverlappingWindowsOfTwoProcessesAreChargedOnce) {
  limit.store(50);
  ComputeLimiter first(clock, stub_ops(), &shared, &limit);
  ComputeLimiter second(clock, stub_ops(), &shared, &limit);
  first.gate(nullptr);  // opens at T
  clock.now += 200'000;
  second.gate(nullptr);  // opens at T+0.2 ms
  clock.now += 800'000;
  first.note_host_sync();  // both saw their work finish at T+1 ms
  second.note_host_sync();
  clock.now += 5 * kMs;
  first.gate(nullptr);   // closes [T, T+1ms]
  second.gate(nullptr);  // closes [T+0.2ms, T+1ms]: already covered
  EXPECT_EQ(shared.busy_total_ns.load(), 1 * kMs);
  EXPECT_EQ(first.stats().busy_ns + second.stats().busy_ns, 1 * kMs);
}

TEST_F(LimiterMechanics, IdleTimeBanksAtMostOneShortBurst) {
  limit.store(50);
  ComputeLimiter limiter(clock, stub_ops(), &shared, &limit);
  limiter.gate(nullptr);  // first refill after "forever": capped
  const std::int64_t cap = shared.tokens_ns.load();
  // (1 - 50%) of the bank, far below the 250 ms window a full bank of (1 - L) · window would give.
  EXPECT_EQ(cap, static_cast<std::int64_t>(Tuning{}.max_bank_ns / 2));
}

// A container that used up its window waits for its next on part, one period after the last,
// and old debt holds it back until repaid.
TEST_F(LimiterMechanics, UsedUpWindowWaitsForTheNextOnPartAndOldDebt) {
  limit.store(25);
  const std::uint64_t period = Tuning{}.period_ns;
  const std::uint64_t window = period / 4;
  ComputeLimiter limiter(clock, stub_ops(), &shared, &limit);
  const std::uint64_t start = clock.now;
  limiter.gate(nullptr);  // opens the window and starts the container's cycle
  shared.tokens_ns.store(-10 * static_cast<std::int64_t>(kMs));
  clock.now += window;  // window spent
  limiter.gate(nullptr);
  // At the next on part the debt is 10 ms + window - 25% of (window + off part) = 10 ms, and
  // the on part's allowance grows at 125%: 8 ms more.
  EXPECT_NEAR(static_cast<double>(clock.now - start), static_cast<double>(period + 8 * kMs), 1e3);
  EXPECT_NEAR(static_cast<double>(limiter.stats().throttled_ns),
              static_cast<double>(period - window + 8 * kMs), 1e3);
  EXPECT_EQ(limiter.stats().windows, 1u);
}

// Without a used-up window, a container out of debt opens at once, even off its on part: work
// below the limit is not delayed.
TEST_F(LimiterMechanics, AfterAPauseAContainerOutOfDebtOpensAtOnce) {
  limit.store(25);
  const std::uint64_t period = Tuning{}.period_ns;
  ComputeLimiter limiter(clock, stub_ops(), &shared, &limit);
  limiter.gate(nullptr);
  clock.now += 1 * kMs;
  limiter.note_host_sync();  // 1 ms of work, then
  clock.now += period / 2;   // a pause into the off part
  limiter.gate(nullptr);     // charged 1 ms, repaid long ago
  EXPECT_EQ(limiter.stats().throttled_ns, 0u);
  EXPECT_EQ(shared.busy_total_ns.load(), 1 * kMs);
  EXPECT_EQ(limiter.stats().windows, 1u);
}

TEST_F(LimiterMechanics, LoweredLimitClosesTheWindowAtTheNextLaunch) {
  limit.store(80);
  Tuning tuning;
  tuning.initial_launch_cap = 1000;  // only the limit change may end the window
  ComputeLimiter limiter(clock, stub_ops(), &shared, &limit, tuning);
  limiter.gate(nullptr);
  clock.now += 100'000;
  limiter.gate(nullptr);
  EXPECT_EQ(Stubs::synchronizes, 1);  // the one before the first window opened
  limit.store(20);
  clock.now += 100'000;
  limiter.gate(nullptr);
  EXPECT_EQ(Stubs::synchronizes, 2);
}

TEST_F(LimiterMechanics, ZeroTuningFallsBackToDefaults) {
  limit.store(50);
  Tuning zero;
  zero.period_ns = 0;
  zero.min_window_ns = 0;
  zero.gap_ns = 0;
  zero.max_sleep_ns = 0;
  zero.initial_launch_cap = 0;
  ComputeLimiter limiter(clock, stub_ops(), &shared, &limit, zero);
  for (int i = 0; i < 10; ++i) {
    limiter.gate(nullptr);
    clock.now += 10'000;
  }
  // Default initial cap (2 launches) closes the first window; no division by zero, no spin.
  EXPECT_GE(limiter.stats().windows, 1u);
}

}  // namespace
}  // namespace gpuslice::limiter

namespace gpuslice::limiter {
namespace {

// Launch-bound: a 20 us kernel every 200 us keeps the device busy 10% of the time. The window's
// probe times its kernels on the device, and the window is charged a tenth of its wall time (the
// old definition charged all of it, the launch gaps being under 1 ms).
TEST_F(LimiterMechanics, SparseLaunchesAreChargedTheirKernelsDeviceTime) {
  limit.store(50);
  EventStubs::kernel_ns = 20'000;
  ComputeLimiter limiter(clock, event_ops(), &shared, &limit);
  for (int i = 0; i < 50; ++i) {  // 10 ms of launches
    launch(limiter);
    clock.now += 200'000;
  }
  limiter.settle();
  // Two windows: the first one's two launches measure the launch cost; the second lasts the rest.
  EXPECT_EQ(limiter.stats().measured_windows, 2u);
  EXPECT_EQ(shared.busy_total_ns.load(), 1 * kMs);
  // Each probe's events: the first window's 2 launches, the second's first 5 ms (25 launches); each
  // pair is placed on the device's timeline by two reads (its events against the first `before`).
  EXPECT_EQ(EventStubs::records, 2 * (2 + 25));
  EXPECT_EQ(EventStubs::elapsed_reads, 2 * (2 + 25));
}

// A probe that finds the device busy at least 90% of the time charges the window in full: the
// device-bound case is charged exactly as before.
TEST_F(LimiterMechanics, BusyProbeChargesTheWindowInFull) {
  limit.store(50);
  EventStubs::kernel_ns = 190'000;
  ComputeLimiter limiter(clock, event_ops(), &shared, &limit);
  for (int i = 0; i < 50; ++i) {
    launch(limiter);
    clock.now += 200'000;
  }
  limiter.settle();
  EXPECT_EQ(limiter.stats().measured_windows, 0u);
  EXPECT_EQ(shared.busy_total_ns.load(), 10 * kMs);
}

// Outside the probe a launch makes no driver call; and a probed launch whose events fail (a context
// destroyed under the limiter) leaves the window charged in full, as before.
TEST_F(LimiterMechanics, FailedEventsChargeTheWindowInFull) {
  limit.store(50);
  EventStubs::kernel_ns = 20'000;
  EventStubs::fail_records = true;
  ComputeLimiter limiter(clock, event_ops(), &shared, &limit);
  for (int i = 0; i < 50; ++i) {
    launch(limiter);
    clock.now += 200'000;
  }
  limiter.settle();
  EXPECT_EQ(limiter.stats().measured_windows, 0u);
  EXPECT_EQ(shared.busy_total_ns.load(), 10 * kMs);
}

// The probe times every launch of its span, whichever thread makes it: a second thread's kernel
// is in the sum too (the old probe charged that window in full).
TEST_F(LimiterMechanics, AnotherThreadsLaunchDuringTheProbeIsTimedToo) {
  limit.store(50);
  EventStubs::kernel_ns = 20'000;
  ComputeLimiter limiter(clock, event_ops(), &shared, &limit);
  for (int i = 0; i < 50; ++i) {
    launch(limiter);
    if (i == 3) std::thread([&] { launch(limiter); }).join();
    clock.now += 200'000;
  }
  limiter.settle();
  EXPECT_EQ(limiter.stats().measured_windows, 2u);
  // The first window's 400 us at a tenth; the second's 9.6 ms at 26 kernels of 20 us in 5 ms.
  EXPECT_EQ(shared.busy_total_ns.load(), 40'000u + 9'600'000u * 104 / 1000);
  EXPECT_EQ(EventStubs::records, 2 * (2 + 26));
}

// Threads launching on streams of their own run their kernels side by side: the probe counts the
// time any of them ran, not each stream's (four streams of concurrent matmuls summed to more than
// the window while the device idled half of it, and the window was charged in full). Here four
// 20 us kernels at once every 200 us: 10% busy, where their sum said 40%.
TEST_F(LimiterMechanics, KernelsOfSeveralStreamsRunningAtOnceAreCountedOnce) {
  limit.store(50);
  EventStubs::kernel_ns = 20'000;
  ComputeLimiter limiter(clock, event_ops(), &shared, &limit);
  for (int i = 0; i < 50; ++i) {
    for (std::uintptr_t stream = 0; stream < 4; ++stream) launch(limiter, reinterpret_cast<CUstream>(stream));
    clock.now += 200'000;
  }
  limiter.settle();
  // 10 ms of launches, a tenth of it busy (their sum: 4 ms).
  EXPECT_EQ(shared.busy_total_ns.load(), 1 * kMs);
}

// Launches into a stream being captured run nothing now: they are never timed.
TEST_F(LimiterMechanics, CapturedLaunchesAreNotProbed) {
  limit.store(50);
  Stubs::capture_status = 1;
  ComputeLimiter limiter(clock, event_ops(), &shared, &limit);
  for (int i = 0; i < 50; ++i) {
    launch(limiter);
    clock.now += 200'000;
  }
  EXPECT_EQ(EventStubs::records, 0);
}

}  // namespace
}  // namespace gpuslice::limiter
