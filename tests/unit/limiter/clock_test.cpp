// The SM clock's part in a compute limit (limiter/clock_correction.h): on a simulated device whose
// clock rises while a limit duty-cycles it (World::clock_model, shaped after an H200's graph replay:
// 1480 MHz flat out, up to 1980 idle), a container is held to its limit of the work it does flat out,
// not only of the device's time, once the limiter knows the flat-out clock.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <tuple>
#include <utility>
#include <vector>

#include "limiter/clock_correction.h"
#include "scenario.h"

namespace gpuslice::limiter::sim {
namespace {

constexpr std::uint64_t kUnlimitedUntil = 2 * kSec;
// Measured from 5 s (one process) or 9 s (two), to 3 s later: the queue of 1024 launches left from
// the unlimited run is drained uncharged first (over 4 s of two processes' 1 and 3 ms kernels), and
// the clock takes a second or two to rise.
constexpr std::uint64_t kMeasured = 3 * kSec;
constexpr std::uint64_t kSample = 100 * kMs;
constexpr std::uint64_t kNvmlPeriod = 200 * kMs;  // NVML's utilization period on an H200

TEST(ClockFactor, IsTheMeasuredPowerOfTheClockRatio) {
  EXPECT_EQ(clock_factor_permille(1480, 1480), 1000u);
  EXPECT_EQ(clock_factor_permille(1400, 1480), 1000u);  // below the reference: never less than GPU time
  EXPECT_EQ(clock_factor_permille(0, 1480), 1000u);     // nothing read
  EXPECT_EQ(clock_factor_permille(1900, 0), 1000u);     // no reference
  // (1900 / 1480)^0.455 = 1.1203; (1600 / 1480)^0.455 = 1.0361.
  EXPECT_EQ(clock_factor_permille(1900, 1480), 1120u);
  EXPECT_EQ(clock_factor_permille(1600, 1480), 1036u);
  // A reading far off is bounded.
  EXPECT_EQ(clock_factor_permille(5000, 1000), kMaxClockFactorPermille);
}

constexpr int kConfirm = ClockReference::kConfirmSamples;
// Samples in a row before the first clock counts: a second flat out, and the samples that confirm it.
constexpr int kFirstCounted = ClockReference::kFlatOutSamples + kConfirm;

TEST(ClockReference, FollowsASecondOfFlatOutSamplesOnceTheSamplesAfterAreFlatOutToo) {
  ClockReference reference;
  for (int i = 0; i < kFirstCounted - 1; ++i) reference.observe(99, 1500);
  EXPECT_EQ(reference.mhz(), 0u);  // the tenth sample's clock is not confirmed yet
  reference.observe(80, 1700);     // an off part: the run starts over
  for (int i = 0; i < kFirstCounted - 1; ++i) reference.observe(100, 1500);
  EXPECT_EQ(reference.mhz(), 0u);
  reference.observe(100, 1500);  // the tenth sample's clock counts
  EXPECT_EQ(reference.mhz(), 1500u);
  for (int i = 0; i < kConfirm; ++i) reference.observe(100, 1400);
  EXPECT_EQ(reference.mhz(), 1500u) << "the 1400s are not confirmed yet";
  reference.observe(100, 1400);
  // The mean of the counted clocks: kConfirm + 1 of 1500 and the first 1400.
  EXPECT_EQ(reference.mhz(), (1500u * (kConfirm + 1) + 1400u + (kConfirm + 2) / 2) / (kConfirm + 2));
  const std::uint32_t held = reference.mhz();
  reference.observe(50, 1980);  // a limited stretch leaves it, and the unconfirmed 1400s are dropped
  EXPECT_EQ(reference.mhz(), held);
  reference.observe(100, 1400);  // and must last a second again
  EXPECT_EQ(reference.mhz(), held);
  reference.observe(100, 0);     // no clock read
  reference.observe(101, 1980);  // not a percentage
  for (int i = 0; i < kFirstCounted - 1; ++i) reference.observe(100, 1400);
  EXPECT_EQ(reference.mhz(), held);
}

// The utilization shows the end of a flat-out stretch late, the clock at once: two H200 traces
// (bench/results/gpu-2026-11-29-b and -c, 100 ms samples of NVML's utilization and SM clock) where
// the old reference, a quarter per flat-out sample, took the raised clock for the flat-out one.
TEST(ClockReference, TheLastSamplesOfAFlatOutStretchDoNotCount) {
  // Four streams (-c, call 4, 4.02 s): NVML's utilization is the busy share of its last completed
  // 200 ms period, so the first sample of the limit's first off part reads 100% at 1,770 MHz (the
  // old reference went to 1,485, and every window under the limit was charged 4% less).
  ClockReference streams;
  for (int i = 0; i < 30; ++i) streams.observe(100, 1390);
  EXPECT_EQ(streams.mhz(), 1390u);
  streams.observe(100, 1770);
  streams.observe(100, 1965);  // a reading is repeated until the next period completes
  streams.observe(43, 1965);
  EXPECT_EQ(streams.mhz(), 1390u);
  for (int i = 0; i < 30; ++i) streams.observe(i % 5 == 4 ? 40 : 100, 1440);  // under the limit
  EXPECT_EQ(streams.mhz(), 1390u);
  // Graph replay (-b, call 4, 51.5 s): the first on parts of a limit set live leave gaps NVML does
  // not see (a 1,725 MHz reading at 100%) while the clock is already the duty-cycled one.
  ClockReference graph;
  for (int i = 0; i < 30; ++i) graph.observe(100, 1475);
  for (const auto& [util, mhz] : {std::pair{100u, 1725u},
                                  {100u, 1515u},
                                  {95u, 1500u},
                                  {95u, 1515u},
                                  {100u, 1515u},
                                  {100u, 1545u},
                                  {6u, 1545u}})
    graph.observe(util, mhz);
  EXPECT_EQ(graph.mhz(), 1475u);
}

// An H200's flat-out clock swings over about a second (1,365-1,425 MHz under four streams of
// matmuls): the reference is the mean of the last second, whichever sample the stretch ends on.
TEST(ClockReference, IsTheMeanOfTheLastFlatOutSecond) {
  constexpr std::uint32_t kSwing[10] = {1410, 1410, 1395, 1380, 1365, 1365, 1380, 1395, 1410, 1425};
  for (int end = 30; end < 40; ++end) {
    ClockReference reference;
    for (int i = 0; i < end; ++i) reference.observe(100, kSwing[i % 10]);
    EXPECT_NEAR(reference.mhz(), 1393.5, 1.0) << "ended after " << end << " samples";
  }
}

// The watcher's first second is not taken (as after a deep idle clock: WakingClocksAreNotTaken).
void first_second(ClockReference& reference) {
  for (std::uint32_t i = 0; i < ClockReference::kWakeSamples; ++i) reference.observe(50, 1400, true);
}

// Before a flat-out second: the second lowest clock of the latest busy samples. The samples are two
// processes of graph replay at 40% on an H200 (bench/results/gpu-2026-11-29-d, call 6): on parts at
// 1,605-1,665 MHz, idle readings at 1,950-1,965 (flat out it ran at 1,565).
TEST(ClockReference, EstimatesTheFlatOutClockAsTheSecondLowestBusyClockUntilOneIsSeen) {
  ClockReference reference;
  reference.set_max_mhz(1980);
  first_second(reference);
  EXPECT_FALSE(reference.can_correct()) << "the first second's 1400s are not taken";
  for (const auto& [util, mhz] : {std::pair{11u, 1665u},
                                  {11u, 1605u},
                                  {89u, 1890u},
                                  {89u, 1965u},  // idle readings
                                  {0u, 1965u},
                                  {0u, 1605u},  // the utilization of a period before it ran
                                  {100u, 1620u},
                                  {100u, 1950u},
                                  {5u, 1400u}})  // hardly busy
    reference.observe(util, mhz, /*power_capped=*/true);
  EXPECT_EQ(reference.estimate_mhz(), 0u) << "four busy samples are not enough";
  EXPECT_FALSE(reference.can_correct());
  reference.observe(90, 1665, true);
  EXPECT_EQ(reference.estimate_mhz(), 1620u);  // of 1665, 1605, 1890, 1620, 1665
  EXPECT_TRUE(reference.can_correct());
  EXPECT_EQ(reference.reference_for(1650), 1620u);
  EXPECT_EQ(reference.reference_for(0), 0u) << "nothing read";
  reference.observe(90, 1275, true);  // one reading far below: the second lowest stays
  EXPECT_EQ(reference.estimate_mhz(), 1605u);
  // The oldest busy samples leave the estimate after kEstimateSamples newer ones.
  for (std::uint32_t i = 0; i < ClockReference::kEstimateSamples; ++i) reference.observe(60, 1700, true);
  EXPECT_EQ(reference.estimate_mhz(), 1700u);
  for (int i = 0; i < kFirstCounted; ++i) reference.observe(100, 1480, true);
  EXPECT_EQ(reference.reference_for(1900), 1480u) << "a measured reference replaces the estimate";
  // Without NVML's maximum clock every loaded sample after the first second counts.
  ClockReference no_max;
  first_second(no_max);
  for (int i = 0; i < 5; ++i) no_max.observe(50, 1900 + 10 * i, true);
  EXPECT_EQ(no_max.estimate_mhz(), 1910u);
}

// An H200 waking from its deep idle clock (345 MHz) for a process started under 70% ran its first
// busy samples at 1,545-1,575 MHz, at a fifth of its power; its on parts then ran at 1,635-1,680 and
// flat out at 1,605 (bench/results/gpu-2026-11-29-e, call 1). The second after waking is not taken.
TEST(ClockReference, WakingClocksAreNotTaken) {
  ClockReference reference;
  reference.set_max_mhz(1980);
  first_second(reference);
  reference.observe(0, 345, true);  // deep idle
  for (const auto& [util, mhz] : {std::pair{3u, 1575u},
                                  {96u, 1545u},
                                  {96u, 1560u},
                                  {48u, 1950u},
                                  {100u, 1695u},
                                  {100u, 1545u},
                                  {100u, 1650u},
                                  {100u, 1650u},
                                  {5u, 1650u},
                                  {100u, 1635u}})
    reference.observe(util, mhz, true);
  EXPECT_EQ(reference.estimate_mhz(), 0u) << "the first second after waking";
  for (const std::uint32_t mhz : {1650u, 1665u, 1680u, 1650u, 1635u}) reference.observe(100, mhz, true);
  EXPECT_EQ(reference.estimate_mhz(), 1650u);  // of 1650, 1665, 1680, 1650, 1635
}

// A clock the power cap does not hold (locked or set by the operator: 1500 MHz at any duty) is its
// flat-out clock too; an estimate from another reading would overcharge it.
TEST(ClockReference, NoEstimateUnlessThePowerCapHeldTheClockInTheLastSecond) {
  ClockReference reference;
  reference.set_max_mhz(1980);
  first_second(reference);
  for (int i = 0; i < 20; ++i) reference.observe(50, 1500, /*power_capped=*/false);
  EXPECT_EQ(reference.reference_for(1600), 0u);
  reference.observe(50, 1500, true);
  EXPECT_EQ(reference.reference_for(1600), 1500u) << "while the cap was seen";
  for (int i = 0; i < 9; ++i) reference.observe(50, 1500, false);
  EXPECT_EQ(reference.reference_for(1600), 1500u) << "within a second of it (an off part reads no cap)";
  reference.observe(50, 1500, false);
  EXPECT_EQ(reference.reference_for(1600), 0u) << "ten samples without it";
}

std::uint32_t read_sim_clock(const void* world) { return static_cast<const World*>(world)->sm_clock_mhz(); }

// How the watcher reads the simulated device: the busy share of the last 100 ms and the clock of
// the averaged load, or as NVML reads an H200: the utilization of the driver's last completed 200 ms
// period, and the clock at its maximum as soon as the device idles (1,770-1,965 MHz within 100 ms).
enum class Readings { Exact, LikeH200 };

void h200_like(World& world, Readings readings = Readings::Exact, double busy_rise = 1.0) {
  world.clock_model = {.flat_mhz = 1480,
                       .idle_mhz = 1980,
                       .tau_ns = kSec,
                       .idle_reads_max = readings == Readings::LikeH200,
                       .busy_rise = busy_rise};
}

// What the library's watcher does every 100 ms from `first_ns`: the device's utilization and SM
// clock into the reference. Also sets the container's limit at kUnlimitedUntil (it runs unlimited
// before, unless it was limited from its start), and keeps the highest reference seen from then on in
// `held_mhz`.
void watcher(World& world, ClockReference& reference, Container& box, unsigned limit, std::uint64_t until,
             Readings readings, std::uint64_t first_ns, std::uint32_t& held_mhz) {
  world.sleep(first_ns - kSample);
  while (world.now() < until) {
    world.sleep(kSample);
    const std::uint64_t now = world.now();
    const double busy = readings == Readings::LikeH200 ? world.nvml_utilization(kNvmlPeriod)
                                                       : world.device_busy(now - kSample, now);
    // The simulated clock is a power cap's: held below its maximum whenever the device is loaded.
    reference.observe(static_cast<std::uint32_t>(busy * 100 + 0.5), world.sm_clock_mhz(),
                      world.sm_clock_mhz() < world.clock_model.idle_mhz);
    if (now >= kUnlimitedUntil) {
      box.limit.store(limit);
      held_mhz = std::max(held_mhz, reference.mhz());
    }
  }
}

// How a run starts: unlimited for 2 s (the flat-out clock is seen), or limited from its first launch
// (the reference is then estimated).
enum class Start { Unlimited, Limited };

struct ClockRun {
  WindowRange work;  // work per second under the limit / flat out, every 1 s window measured
  WindowRange gpu_time;
  Stats stats;
  std::uint32_t reference_mhz = 0;  // the highest flat-out reference while limited
};

// A run's device and watcher.
struct Setup {
  std::uint64_t timeslice_ns = 0;  // 0: the device shares itself evenly
  Start start = Start::Unlimited;
  Readings readings = Readings::Exact;
  std::uint64_t first_sample_ns = kSample;  // the watcher's first sample (then every kSample)
  double busy_rise = 1.0;                   // World::ClockModel::busy_rise
};

// The work per second of processes that run kernel loops flat out (1 s to 2 s: the clock at
// flat_mhz throughout).
double unlimited_work(std::initializer_list<std::uint64_t> kernel_ns, std::uint64_t timeslice_ns,
                      double busy_rise) {
  Scenario s;
  h200_like(s.world, Readings::Exact, busy_rise);
  s.world.timeslice_ns = timeslice_ns;
  Container& box = s.add_container(100);
  std::vector<Process*> processes;
  for (const std::uint64_t kernel : kernel_ns) {
    Process& p = s.add_process(box);
    processes.push_back(&p);
    s.add_thread(p, [&s, &p, kernel] { kernel_loop(p, s.world, kernel, 5 * kUs, kUnlimitedUntil); });
  }
  s.run();
  double work = 0;
  for (Process* p : processes) work += s.world.work_done(p->ctx, kUnlimitedUntil - kSec, kUnlimitedUntil);
  return work;
}

// Processes of one container, each a loop of `kernel_ns[i]` kernels, unlimited for 2 s and then
// under `limit`; `corrected`: the limiters read the clock and the watcher's reference.
ClockRun run(unsigned limit, bool corrected, std::initializer_list<std::uint64_t> kernel_ns,
             const Setup& setup = {}) {
  const bool limited_first = setup.start != Start::Unlimited;
  // Limited from the start there is no queue from an unlimited run: measured from its first second.
  const std::uint64_t from = limited_first ? 0 : kernel_ns.size() > 1 ? 9 * kSec : 5 * kSec;
  const std::uint64_t until = from + kMeasured;
  Scenario s;
  h200_like(s.world, setup.readings, setup.busy_rise);
  s.world.timeslice_ns = setup.timeslice_ns;
  Container& box = s.add_container(limited_first ? limit : 100);
  ClockReference reference;
  reference.set_max_mhz(s.world.clock_model.idle_mhz);
  const SmClockSource source{.read_mhz = &read_sim_clock, .arg = &s.world, .reference = &reference};
  std::vector<Process*> processes;
  for (const std::uint64_t kernel : kernel_ns) {
    Process& p = s.add_process(box);
    if (corrected) p.limiter->set_clock_source(&source);
    processes.push_back(&p);
    s.add_thread(p, [&s, &p, kernel, until] { kernel_loop(p, s.world, kernel, 5 * kUs, until); });
  }
  ClockRun result;
  s.add_thread(*processes.front(), [&] {
    watcher(s.world, reference, box, limit, until, setup.readings, setup.first_sample_ns,
            result.reference_mhz);
  });
  s.run();
  // Flat out: the work of the unlimited second before the limit (the clock at flat_mhz throughout),
  // or, limited from the start, of the same processes in a run that is never limited.
  double flat = limited_first ? unlimited_work(kernel_ns, setup.timeslice_ns, setup.busy_rise) : 0;
  if (!limited_first)
    for (Process* p : processes) flat += s.world.work_done(p->ctx, kUnlimitedUntil - kSec, kUnlimitedUntil);
  result.work.min = 1.0;
  double sum = 0;
  int count = 0;
  for (std::uint64_t t = from; t + kSec <= until; t += 10 * kMs) {
    double work = 0;
    for (Process* p : processes) work += s.world.work_done(p->ctx, t, t + kSec);
    const double ratio = work / flat;
    if (std::getenv("CLOCK_TEST_TRACE") != nullptr && t % (100 * kMs) == 0)
      std::fprintf(stderr, "t=%.1f work %.3f gpu %.3f\n", t / 1e9, ratio,
                   s.world.occupancy(box.id, t, t + kSec));
    result.work.min = std::min(result.work.min, ratio);
    result.work.max = std::max(result.work.max, ratio);
    sum += ratio;
    ++count;
  }
  result.work.mean = sum / count;
  result.gpu_time = s.sliding(box, from, until);
  for (Process* p : processes) {
    const Stats st = p->limiter->stats();
    result.stats.clock_windows += st.clock_windows;
    result.stats.clock_extra_ns += st.clock_extra_ns;
  }
  return result;
}

class LimiterClock : public ::testing::TestWithParam<unsigned> {};

// The model reproduces the error the correction is for: held to its GPU time, the duty-cycled
// device does more than the limit of its flat-out work (as an H200 did: +1.7 points at 20%, +2.6 at 80%).
TEST_P(LimiterClock, WithoutTheClockTheWorkExceedsTheLimit) {
  const unsigned limit = GetParam();
  const ClockRun r = run(limit, /*corrected=*/false, {1 * kMs});
  EXPECT_NEAR(r.gpu_time.mean, limit / 100.0, 0.01) << describe(r.gpu_time);
  EXPECT_GT(r.work.mean, limit / 100.0 + 0.015) << describe(r.work);
  EXPECT_EQ(r.stats.clock_windows, 0u);
}

// With the flat-out clock known (the unlimited start), every 1 s window's work is within a point of
// the limit, and the device's time below it by the clock's share.
TEST_P(LimiterClock, WithTheClockTheWorkIsHeldToTheLimit) {
  const unsigned limit = GetParam();
  const ClockRun r = run(limit, /*corrected=*/true, {1 * kMs});
  EXPECT_GE(r.work.min, limit / 100.0 - 0.01) << describe(r.work);
  EXPECT_LE(r.work.max, limit / 100.0 + 0.01) << describe(r.work);
  EXPECT_LT(r.gpu_time.mean, limit / 100.0) << describe(r.gpu_time);
  EXPECT_GT(r.stats.clock_windows, 0u);
}

// Two processes of one container on a time-slicing device (2 ms slices): their sum too.
TEST_P(LimiterClock, TwoProcessesOfOneContainerAreHeldTogether) {
  const unsigned limit = GetParam();
  const ClockRun r = run(limit, /*corrected=*/true, {1 * kMs, 3 * kMs}, {.timeslice_ns = 2 * kMs});
  EXPECT_GE(r.work.min, limit / 100.0 - 0.02) << describe(r.work);
  EXPECT_LE(r.work.max, limit / 100.0 + 0.02) << describe(r.work);
}

INSTANTIATE_TEST_SUITE_P(Limits, LimiterClock, ::testing::Values(20u, 30u, 50u, 80u));

class LimiterClockLikeH200 : public ::testing::TestWithParam<unsigned> {};

// Read as NVML reads an H200, the limit's first off part shows the idle clock while the utilization
// still shows the flat-out period before it, when the watcher's sample falls early enough in it
// (bench/results/clock-reference-2026-11-29/): whatever the watcher's phase against NVML's periods,
// the reference stays the flat-out clock and every 1 s window's work is within a point of the limit.
// Counting that sample put the reference 125-220 MHz high here (the work +2.3 to +3.2 points over).
TEST_P(LimiterClockLikeH200, TheClockOfTheFirstIdleSampleIsNotTakenForTheFlatOutOne) {
  const unsigned limit = GetParam();
  for (std::uint64_t first = kSample; first < 2 * kSample; first += kSample / 4) {
    const ClockRun r =
        run(limit, /*corrected=*/true, {1 * kMs}, {.readings = Readings::LikeH200, .first_sample_ns = first});
    EXPECT_GE(r.reference_mhz, 1480u) << "first sample at " << first / kMs << " ms";
    EXPECT_LE(r.reference_mhz, 1480u + 10) << "first sample at " << first / kMs << " ms";
    EXPECT_GE(r.work.min, limit / 100.0 - 0.01) << describe(r.work);
    EXPECT_LE(r.work.max, limit / 100.0 + 0.01) << describe(r.work);
  }
}

INSTANTIATE_TEST_SUITE_P(Limits, LimiterClockLikeH200, ::testing::Values(20u, 30u, 50u, 80u));

class LimiterClockFromStart : public ::testing::TestWithParam<unsigned> {};

// Limited from its first launch, no flat-out second is ever seen: the reference is the estimate (the
// second lowest busy clock). On a device shaped after an H200 under a duty cycle (on parts near the
// flat-out clock, idle readings at the maximum, NVML's 200 ms utilization), every 1 s window from the
// first is within 1.5 points of the limit (two processes: 2). The earlier estimate from the duty,
// max - (max - window) / duty, held them 2 to 5 points under the limit at 70% and 80% (1 s windows
// 0.635-0.700 at 70%).
constexpr Setup kFromStartLikeH200{.start = Start::Limited, .readings = Readings::LikeH200, .busy_rise = 0.2};

TEST_P(LimiterClockFromStart, OneProcessIsHeldToTheLimitFromItsFirstSecond) {
  const unsigned limit = GetParam();
  const ClockRun r = run(limit, /*corrected=*/true, {1 * kMs}, kFromStartLikeH200);
  EXPECT_GE(r.work.min, limit / 100.0 - 0.015) << describe(r.work);
  EXPECT_LE(r.work.max, limit / 100.0 + 0.015) << describe(r.work);
}

TEST_P(LimiterClockFromStart, TwoProcessesOfOneContainerAreHeldTogetherFromTheirFirstSecond) {
  const unsigned limit = GetParam();
  ::gpuslice::limiter::sim::Setup setup = kFromStartLikeH200;
  setup.timeslice_ns = 2 * kMs;
  const ClockRun r = run(limit, /*corrected=*/true, {1 * kMs, 3 * kMs}, setup);
  EXPECT_GE(r.work.min, limit / 100.0 - 0.02) << describe(r.work);
  EXPECT_LE(r.work.max, limit / 100.0 + 0.02) << describe(r.work);
}

INSTANTIATE_TEST_SUITE_P(Limits, LimiterClockFromStart, ::testing::Values(20u, 40u, 70u, 80u));

}  // namespace
}  // namespace gpuslice::limiter::sim
