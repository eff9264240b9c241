// The limiter against the simulated device (sim.h): achieved occupancy over sliding 1 s windows
// of virtual time, for the workloads of the accuracy benchmark and the sharing cases of
// docs/compute-limiter.md.
#include "scenario.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

namespace gpuslice::limiter::sim {
namespace {

constexpr double kTolerance = 0.05;  // ±5 points

struct Workload {
  const char* name;
  std::uint64_t kernel_ns;
  std::uint64_t cpu_ns;  // host time per launch
  std::uint64_t run_ns;
};

// (a) long kernels, device-bound; (b) a tight loop of tiny kernels: the launch queue fills and a
// drain must bound the burst; (b') tiny kernels launched slower than the device runs them: the
// device is busy half the wall time, so a limit of 50% or more leaves it alone.
const Workload kWorkloads[] = {
    {"10ms_kernels", 10 * kMs, 5 * kUs, 5 * kSec},
    {"5us_kernels_tight_loop", 5 * kUs, 2 * kUs, 2 * kSec},
    {"3us_kernels_cpu_bound", 3 * kUs, 6 * kUs, 2 * kSec},
};

// Work per ns of `body` (one thread of one process) run without a limit until `run_ns`.
double unthrottled_rate_of(const std::function<void(Process&, World&)>& body, std::uint64_t run_ns) {
  Scenario s;
  Container& box = s.add_container(0);
  Process& p = s.add_process(box);
  s.add_thread(p, [&] { body(p, s.world); });
  s.run();
  return s.world.work_done(p.ctx, 0, run_ns) / static_cast<double>(run_ns);
}

double measure_unthrottled_rate(const Workload& w) {
  return unthrottled_rate_of(
      [&](Process& p, World& world) { kernel_loop(p, world, w.kernel_ns, w.cpu_ns, w.run_ns); }, w.run_ns);
}

// Deterministic, so each workload's baseline is simulated once.
double unthrottled_rate(int workload) {
  static double rates[std::size(kWorkloads)] = {};
  if (rates[workload] == 0) rates[workload] = measure_unthrottled_rate(kWorkloads[workload]);
  return rates[workload];
}

class LimiterAccuracy : public ::testing::TestWithParam<std::tuple<int, unsigned>> {};

// Throughput relative to the same workload unthrottled, as bench/gpu/compute_accuracy.py measures
// it on a real GPU: the limit over the share of the device the workload keeps busy on its own (1
// where that share is below the limit); the device's occupancy never exceeds the limit.
TEST_P(LimiterAccuracy, ThroughputTracksTheLimitInEverySecond) {
  const Workload& w = kWorkloads[std::get<0>(GetParam())];
  const unsigned limit = std::get<1>(GetParam());
  const double baseline = unthrottled_rate(std::get<0>(GetParam()));
  Scenario s;
  Container& box = s.add_container(limit);
  Process& p = s.add_process(box);
  s.add_thread(p, [&] { kernel_loop(p, s.world, w.kernel_ns, w.cpu_ns, w.run_ns); });
  s.run();
  const WindowRange range = s.sliding_throughput(p, baseline, 0, w.run_ns);
  const double natural_busy =
      static_cast<double>(w.kernel_ns) / static_cast<double>(std::max(w.kernel_ns, w.cpu_ns));
  const double share = limit / 100.0;
  const double target = std::min(1.0, share / natural_busy);
  EXPECT_GE(range.min, target - kTolerance) << w.name << ": " << describe(range);
  EXPECT_LE(range.max, target + kTolerance) << w.name << ": " << describe(range);
  EXPECT_NEAR(range.mean, target, 0.02) << w.name << ": " << describe(range);
  const WindowRange occupancy = s.sliding(box, 0, w.run_ns);
  EXPECT_LE(occupancy.max, share + kTolerance) << w.name << ": " << describe(occupancy);
  if (natural_busy >= share) {  // held to the limit: the device itself is busy limit% of the time
    EXPECT_GE(occupancy.min, share - kTolerance) << w.name << ": " << describe(occupancy);
  }
}

INSTANTIATE_TEST_SUITE_P(Workloads, LimiterAccuracy,
                         ::testing::Combine(::testing::Values(0, 1, 2), ::testing::Values(20u, 50u, 80u)),
                         [](const auto& param_info) {
                           return std::string(kWorkloads[std::get<0>(param_info.param)].name) + "_limit" +
                                  std::to_string(std::get<1>(param_info.param));
                         });

class LimiterShortPauses : public ::testing::TestWithParam<unsigned> {};

// (a') Busy work with short host pauses and no host sync, like a training step's Python work:
// 20 kernels of 100 us launched at once, then 2 ms on the CPU. Each pause ends a window; the next
// one must reopen within the on part, not wait for the whole budget to be repaid.
TEST_P(LimiterShortPauses, BusyWorkWithShortHostPausesGetsItsShare) {
  const unsigned limit = GetParam();
  constexpr std::uint64_t kRun = 4 * kSec;
  auto steps = [](Process& p, World& world) {
    while (world.now() < kRun) {
      for (int i = 0; i < 20; ++i) {
        gated_launch(p, world, 100 * kUs);
        world.sleep(5 * kUs);
      }
      world.sleep(2 * kMs);
    }
  };
  const double baseline = unthrottled_rate_of(steps, kRun);
  Scenario s;
  Container& box = s.add_container(limit);
  Process& p = s.add_process(box);
  s.add_thread(p, [&] { steps(p, s.world); });
  s.run();
  const WindowRange range = s.sliding_throughput(p, baseline, 0, kRun);
  const double target = limit / 100.0;
  EXPECT_GE(range.min, target - kTolerance) << describe(range);
  EXPECT_LE(range.max, target + kTolerance) << describe(range);
  EXPECT_NEAR(range.mean, target, 0.02) << describe(range);
}

INSTANTIATE_TEST_SUITE_P(Limits, LimiterShortPauses, ::testing::Values(20u, 50u, 80u));

class LimiterLongKernel : public ::testing::TestWithParam<unsigned> {};

// (c) A 300 ms kernel among 1 ms ones. A launched kernel cannot be recalled, so the second that
// contains it holds up to limit + (1 - limit) * 300 ms of busy time, and the debt is repaid by
// idling afterwards; the long-run share stays exact and the limit holds again once it is repaid.
TEST_P(LimiterLongKernel, IsChargedInFullAndRepaid) {
  const unsigned limit = GetParam();
  const double target = limit / 100.0;
  constexpr std::uint64_t kLong = 300 * kMs;
  constexpr std::uint64_t kLongAt = 2 * kSec;
  constexpr std::uint64_t kEnd = 8 * kSec;
  Scenario s;
  Container& box = s.add_container(limit);
  Process& p = s.add_process(box);
  std::uint64_t long_done = 0;
  s.add_thread(p, [&] {
    kernel_loop(p, s.world, 1 * kMs, 5 * kUs, kLongAt);
    gated_launch(p, s.world, kLong);
    s.world.synchronize();
    p.limiter->note_host_sync();
    long_done = s.world.now();
    kernel_loop(p, s.world, 1 * kMs, 5 * kUs, kEnd);
  });
  s.run();
  const WindowRange all = s.sliding(box, 0, kEnd);
  EXPECT_LE(all.max, target + (1 - target) * 0.3 + kTolerance) << describe(all);
  EXPECT_NEAR(s.world.occupancy(box.id, 0, kEnd), target, 0.02);
  // Repaying (1 - limit) * 300 ms of excess at limit% takes at most 1.2 s (limit 20).
  const WindowRange after = s.sliding(box, long_done + 1200 * kMs, kEnd);
  EXPECT_GE(after.min, target - kTolerance) << describe(after);
  EXPECT_LE(after.max, target + kTolerance) << describe(after);
}

INSTANTIATE_TEST_SUITE_P(Limits, LimiterLongKernel, ::testing::Values(20u, 50u, 80u));

// (c') Long kernels one at a time (10-100 ms, as a model's big layers or torch.cuda._sleep make
// them): each launch waits for the previous kernel. A window admits whole kernels only, so without
// accounting for their length the last one of every on part overruns it. The share over the run
// must be within ±3 points, and every 1 s window within ±3 points plus one kernel's granularity.
struct LongKernelCase {
  std::uint64_t kernel_ns;
  unsigned limit;
  bool host_sync;  // the application synchronises after each kernel (else the next launch queues)
};

class LimiterLongKernels : public ::testing::TestWithParam<LongKernelCase> {};

TEST_P(LimiterLongKernels, OneAtATimeHoldTheLimitWithinThreePoints) {
  const LongKernelCase c = GetParam();
  constexpr std::uint64_t kRun = 12 * kSec;
  auto loop = [&c](Process& p, World& world) {
    while (world.now() < kRun) {
      gated_launch(p, world, c.kernel_ns);
      if (c.host_sync) {
        world.synchronize();
        p.limiter->note_host_sync();
      }
      world.sleep(20 * kUs);
    }
  };
  const double baseline = unthrottled_rate_of(loop, kRun);
  Scenario s;
  Container& box = s.add_container(c.limit);
  Process& p = s.add_process(box);
  s.add_thread(p, [&] { loop(p, s.world); });
  s.run();
  const double target = c.limit / 100.0;
  // The first seconds find the kernel length; the share is judged after them.
  const double share =
      s.world.work_done(p.ctx, 2 * kSec, kRun) / (baseline * static_cast<double>(kRun - 2 * kSec));
  EXPECT_NEAR(share, target, 0.03) << "kernel " << c.kernel_ns / kMs << " ms, limit " << c.limit;
  const WindowRange range = s.sliding_throughput(p, baseline, 2 * kSec, kRun);
  const double granularity = static_cast<double>(c.kernel_ns) / kSec;
  EXPECT_LE(range.max, target + 0.03 + granularity) << describe(range);
  EXPECT_GE(range.min, target - 0.03 - granularity) << describe(range);
  ::testing::Test::RecordProperty("share_permille", static_cast<int>(share * 1000));
}

INSTANTIATE_TEST_SUITE_P(Lengths, LimiterLongKernels, ::testing::ValuesIn([] {
                           std::vector<LongKernelCase> cases;
                           for (std::uint64_t ms : {10, 40, 100})
                             for (unsigned limit : {20u, 30u, 50u, 80u})
                               for (bool sync : {true, false}) cases.push_back({ms * kMs, limit, sync});
                           return cases;
                         }()),
                         [](const auto& param_info) {
                           const LongKernelCase& c = param_info.param;
                           return std::to_string(c.kernel_ns / kMs) + "ms_limit" + std::to_string(c.limit) +
                                  (c.host_sync ? "_sync" : "_queued");
                         });

// (c'') The same kernels as the accuracy benchmark runs them on a GPU: the container runs unlimited,
// `gpuslice set --compute` lowers the limit live, it takes turns (a container with a compute limit
// publishes its turn on the node channel), and the share is judged over 5 s after a 1 s settling,
// not over a long run. Before the fix the windows re-opened in the rest of every on part for one
// more kernel whatever was left (100 ms at 30%: 2 kernels per 150 ms part, 0.40), and a window's
// single long launch doubled its measured cost (LaunchCost halved a sum of 1).
class LimiterLongKernelsAfterALiveChange : public ::testing::TestWithParam<LongKernelCase> {};

TEST_P(LimiterLongKernelsAfterALiveChange, HoldTheNewLimitWithinThreePoints) {
  const LongKernelCase c = GetParam();
  constexpr std::uint64_t kChange = 2 * kSec;
  constexpr std::uint64_t kFrom = kChange + 1 * kSec;
  constexpr std::uint64_t kRun = kFrom + 5 * kSec;
  Scenario s;
  Container& box = s.add_container(100);
  Process& p = s.add_process(box);
  std::atomic<std::uint64_t> turn{0};  // this container's offset in the node-wide cycle
  p.limiter->set_phase_source(&turn);
  auto loop = [&c, &box](Process& proc, World& world) {
    while (world.now() < kRun) {
      if (world.now() >= kChange) box.limit.store(c.limit);
      gated_launch(proc, world, c.kernel_ns);
      world.synchronize();
      proc.limiter->note_host_sync();
      world.sleep(20 * kUs);
    }
  };
  const double baseline = unthrottled_rate_of(loop, kRun);
  s.add_thread(p, [&] { loop(p, s.world); });
  s.run();
  const double share = s.world.work_done(p.ctx, kFrom, kRun) / (baseline * static_cast<double>(kRun - kFrom));
  EXPECT_NEAR(share, c.limit / 100.0, 0.03) << "kernel " << c.kernel_ns / kMs << " ms, limit " << c.limit;
}

INSTANTIATE_TEST_SUITE_P(Lengths, LimiterLongKernelsAfterALiveChange, ::testing::ValuesIn([] {
                           std::vector<LongKernelCase> cases;
                           for (std::uint64_t ms : {10, 40, 100})
                             for (unsigned limit : {20u, 30u, 50u, 80u})
                               cases.push_back({ms * kMs, limit, true});
                           return cases;
                         }()),
                         [](const auto& param_info) {
                           const LongKernelCase& c = param_info.param;
                           return std::to_string(c.kernel_ns / kMs) + "ms_limit" + std::to_string(c.limit);
                         });

// (d) 10 ms of GPU work, a host sync, then 40 ms on the CPU: 20% natural occupancy.
int gapped_iterations(unsigned limit, bool notify_sync, double* occupancy) {
  Scenario s;
  Container& box = s.add_container(limit);
  Process& p = s.add_process(box);
  int iterations = 0;
  s.add_thread(p, [&] {
    while (s.world.now() < 5 * kSec) {
      gated_launch(p, s.world, 10 * kMs);
      s.world.synchronize();
      if (notify_sync) p.limiter->note_host_sync();
      s.world.sleep(40 * kMs);
      ++iterations;
    }
  });
  s.run();
  if (occupancy != nullptr) *occupancy = s.sliding(box, 0, 5 * kSec).max;
  return iterations;
}

TEST(LimiterCpuGaps, WorkloadBelowTheLimitIsNotSlowed) {
  const int free_running = gapped_iterations(0, true, nullptr);
  EXPECT_EQ(free_running, 100);
  EXPECT_GE(gapped_iterations(50, true, nullptr), free_running * 95 / 100);
  EXPECT_GE(gapped_iterations(25, true, nullptr), free_running * 95 / 100);
}

TEST(LimiterCpuGaps, WorkloadAboveTheLimitIsHeldToIt) {
  double occupancy = 0;
  gapped_iterations(10, true, &occupancy);
  EXPECT_LE(occupancy, 0.10 + kTolerance);
  EXPECT_GE(occupancy, 0.10 - kTolerance);
}

// Without host-sync notifications the limiter cannot see when the device went idle during a CPU
// pause and charges the pause (up to one window): such a workload may be slowed, but never below
// limit% of its free-running rate, because nothing is charged beyond wall time.
TEST(LimiterCpuGaps, WithoutSyncNotificationsAtLeastTheLimitRemains) {
  const int free_running = gapped_iterations(0, false, nullptr);
  EXPECT_GE(gapped_iterations(50, false, nullptr), free_running * 50 / 100);
  EXPECT_GE(gapped_iterations(20, false, nullptr), free_running * 20 / 100);
}

class LimiterTwoProcesses : public ::testing::TestWithParam<unsigned> {};

// (e) Two processes of one container (two contexts that time-slice) share one budget.
TEST_P(LimiterTwoProcesses, TogetherHoldTheContainerLimit) {
  const unsigned limit = GetParam();
  Scenario s;
  Container& box = s.add_container(limit);
  Process& a = s.add_process(box);
  Process& b = s.add_process(box);
  s.add_thread(a, [&] { kernel_loop(a, s.world, 1 * kMs, 5 * kUs, 4 * kSec); });
  s.add_thread(b, [&] { kernel_loop(b, s.world, 3 * kMs, 5 * kUs, 4 * kSec); });
  s.run();
  const WindowRange range = s.sliding(box, 0, 4 * kSec);
  EXPECT_GE(range.min, limit / 100.0 - kTolerance) << describe(range);
  EXPECT_LE(range.max, limit / 100.0 + kTolerance) << describe(range);
  EXPECT_GT(a.limiter->stats().busy_ns, 0u);
  EXPECT_GT(b.limiter->stats().busy_ns, 0u);
}

// Two threads of one process launching concurrently: one drains, the other waits with it.
TEST_P(LimiterTwoProcesses, TwoThreadsOfOneProcessHoldTheLimit) {
  const unsigned limit = GetParam();
  Scenario s;
  Container& box = s.add_container(limit);
  Process& p = s.add_process(box);
  s.add_thread(p, [&] { kernel_loop(p, s.world, 1 * kMs, 5 * kUs, 4 * kSec); });
  s.add_thread(p, [&] { kernel_loop(p, s.world, 20 * kUs, 5 * kUs, 4 * kSec); });
  s.run();
  const WindowRange range = s.sliding(box, 0, 4 * kSec);
  EXPECT_GE(range.min, limit / 100.0 - kTolerance) << describe(range);
  EXPECT_LE(range.max, limit / 100.0 + kTolerance) << describe(range);
}

INSTANTIATE_TEST_SUITE_P(Limits, LimiterTwoProcesses, ::testing::Values(20u, 50u, 80u));

// The same two processes, each 1 s window from the first second within 2 points, on a device that
// shares itself evenly between contexts and on one that time-slices (2 ms slices, as the H100's).
// Each process learns the cost of its launches from its own windows; time-sliced, a process's first
// kernels ran alone and looked cheaper than beside the other, so its window admitted more of them
// than its time held and they ran past its close (1 s windows 0.42-0.57 at 50%, 0.73-0.91 at 80%).
class LimiterTwoProcessesEverySecond : public ::testing::TestWithParam<std::tuple<unsigned, std::uint64_t>> {
};

TEST_P(LimiterTwoProcessesEverySecond, HoldTheContainerLimitWithinTwoPoints) {
  const unsigned limit = std::get<0>(GetParam());
  Scenario s;
  s.world.timeslice_ns = std::get<1>(GetParam());
  Container& box = s.add_container(limit);
  Process& a = s.add_process(box);
  Process& b = s.add_process(box);
  s.add_thread(a, [&] { kernel_loop(a, s.world, 1 * kMs, 5 * kUs, 4 * kSec); });
  s.add_thread(b, [&] { kernel_loop(b, s.world, 3 * kMs, 5 * kUs, 4 * kSec); });
  s.run();
  const WindowRange range = s.sliding(box, 0, 4 * kSec);
  EXPECT_GE(range.min, limit / 100.0 - 0.02) << describe(range);
  EXPECT_LE(range.max, limit / 100.0 + 0.02) << describe(range);
}

// The second process starts 1.7 s after the first, inside an on part: the first one's window was
// sized by what its kernels cost alone, and ran on beside the second's (0.41-0.77 at 50%).
TEST_P(LimiterTwoProcessesEverySecond, ASecondProcessStartingMidwayIsHeldWithTheFirst) {
  const unsigned limit = std::get<0>(GetParam());
  Scenario s;
  s.world.timeslice_ns = std::get<1>(GetParam());
  Container& box = s.add_container(limit);
  Process& a = s.add_process(box);
  Process& b = s.add_process(box);
  s.add_thread(a, [&] { kernel_loop(a, s.world, 1 * kMs, 5 * kUs, 5 * kSec); });
  s.add_thread(b, [&] {
    s.world.sleep(1700 * kMs);
    kernel_loop(b, s.world, 3 * kMs, 5 * kUs, 5 * kSec);
  });
  s.run();
  const WindowRange range = s.sliding(box, 0, 5 * kSec);
  EXPECT_GE(range.min, limit / 100.0 - 0.02) << describe(range);
  EXPECT_LE(range.max, limit / 100.0 + 0.02) << describe(range);
  EXPECT_GT(b.limiter->stats().busy_ns, 0u);
}

// Longer kernels, 5 and 10 ms (10 and 20 ms each beside the other): 0.79-0.825 at 80% in 2 ms slices
// while only windows of four or more launches were bounded.
TEST_P(LimiterTwoProcessesEverySecond, LongerKernelsAreHeldToo) {
  const unsigned limit = std::get<0>(GetParam());
  Scenario s;
  s.world.timeslice_ns = std::get<1>(GetParam());
  Container& box = s.add_container(limit);
  Process& a = s.add_process(box);
  Process& b = s.add_process(box);
  s.add_thread(a, [&] { kernel_loop(a, s.world, 5 * kMs, 5 * kUs, 4 * kSec); });
  s.add_thread(b, [&] { kernel_loop(b, s.world, 10 * kMs, 5 * kUs, 4 * kSec); });
  s.run();
  const WindowRange range = s.sliding(box, 0, 4 * kSec);
  EXPECT_GE(range.min, limit / 100.0 - 0.02) << describe(range);
  EXPECT_LE(range.max, limit / 100.0 + 0.02) << describe(range);
}

INSTANTIATE_TEST_SUITE_P(LimitsAndDeviceModels, LimiterTwoProcessesEverySecond,
                         ::testing::Combine(::testing::Values(40u, 50u, 70u, 80u),
                                            ::testing::Values(std::uint64_t{0}, 2 * kMs)));

// (f) Two containers, 30% and 70%, on one time-sliced device, both always busy.
struct TwoContainerResult {
  WindowRange a, b;
};

TwoContainerResult two_containers(unsigned limit_a, unsigned limit_b, bool phased) {
  Scenario s;
  Container& a = s.add_container(limit_a);
  Container& b = s.add_container(limit_b);
  Process& pa = s.add_process(a);
  Process& pb = s.add_process(b);
  // What a node-wide coordinator would hand out: consecutive turns in the cycle.
  std::atomic<std::uint64_t> phase_a{0};
  std::atomic<std::uint64_t> phase_b{limit_a * (Tuning{}.period_ns / 100)};
  if (phased) {
    pa.limiter->set_phase_source(&phase_a);
    pb.limiter->set_phase_source(&phase_b);
  }
  s.add_thread(pa, [&] { kernel_loop(pa, s.world, 1 * kMs, 5 * kUs, 6 * kSec); });
  s.add_thread(pb, [&] { kernel_loop(pb, s.world, 2 * kMs, 5 * kUs, 6 * kSec); });
  s.run();
  return {s.sliding(a, 0, 6 * kSec), s.sliding(b, 0, 6 * kSec)};
}

TEST(LimiterTwoContainers, WithTurnsEachGetsItsShare) {
  const TwoContainerResult r = two_containers(30, 70, true);
  EXPECT_GE(r.a.min, 0.30 - kTolerance) << describe(r.a);
  EXPECT_LE(r.a.max, 0.30 + kTolerance) << describe(r.a);
  EXPECT_GE(r.b.min, 0.70 - kTolerance) << describe(r.b);
  EXPECT_LE(r.b.max, 0.70 + kTolerance) << describe(r.b);
}

// Uncoordinated, each container is charged the wall time of its windows, including time the other
// one's kernels held the device. Each stays within its own limit (isolation holds) but where the
// windows overlap both lose: with independent phases, a container keeps about
// limit * (1 - other/2). docs/compute-limiter.md explains why turns are needed for full shares.
TEST(LimiterTwoContainers, WithoutTurnsNeitherExceedsItsLimit) {
  const TwoContainerResult r = two_containers(30, 70, false);
  EXPECT_LE(r.a.max, 0.30 + kTolerance) << describe(r.a);
  EXPECT_LE(r.b.max, 0.70 + kTolerance) << describe(r.b);
  EXPECT_GE(r.a.mean, 0.30 * (1 - 0.70 / 2) - kTolerance) << describe(r.a);
  EXPECT_GE(r.b.mean, 0.70 * (1 - 0.30 / 2) - kTolerance) << describe(r.b);
}

// (g) gpuslice set --compute on a running container.
struct LiveChangeResult {
  std::uint64_t settle_ns;  // from the change until every later 1 s window is within ±5 points
  WindowRange before, after;
};

LiveChangeResult live_change(unsigned from, unsigned to) {
  constexpr std::uint64_t kChangeAt = 3 * kSec;
  constexpr std::uint64_t kEnd = 6 * kSec;
  Scenario s;
  Container& box = s.add_container(from);
  Process& p = s.add_process(box);
  s.add_thread(p, [&] {
    kernel_loop(p, s.world, 2 * kMs, 5 * kUs, kChangeAt);
    box.limit.store(to);  // another process (the CLI) writes the limit; gate() reads it live
    kernel_loop(p, s.world, 2 * kMs, 5 * kUs, kEnd);
  });
  s.run();
  LiveChangeResult result{};
  result.settle_ns = kEnd;
  for (std::uint64_t t = kEnd - kSec; t + 10 * kMs > kChangeAt; t -= 10 * kMs) {
    const double occupancy = s.world.occupancy(box.id, t, t + kSec);
    if (occupancy > to / 100.0 + kTolerance || occupancy < to / 100.0 - kTolerance) break;
    result.settle_ns = t - kChangeAt;
  }
  result.before = s.sliding(box, 0, kChangeAt);
  result.after = s.sliding(box, kChangeAt + result.settle_ns, kEnd);
  return result;
}

TEST(LimiterLiveChange, LoweringSettlesWithinOneSecond) {
  const LiveChangeResult r = live_change(80, 20);
  EXPECT_LE(r.settle_ns, 1 * kSec);
  ::testing::Test::RecordProperty("settle_ms", static_cast<int>(r.settle_ns / kMs));
  EXPECT_NEAR(r.before.mean, 0.80, kTolerance) << describe(r.before);
  EXPECT_NEAR(r.after.mean, 0.20, 0.02) << describe(r.after);
}

TEST(LimiterLiveChange, RaisingSettlesWithinOneSecond) {
  const LiveChangeResult r = live_change(20, 80);
  EXPECT_LE(r.settle_ns, 1 * kSec);
  ::testing::Test::RecordProperty("settle_ms", static_cast<int>(r.settle_ns / kMs));
  EXPECT_NEAR(r.after.mean, 0.80, 0.02) << describe(r.after);
}

TEST(LimiterLiveChange, LiftingTheLimitStopsThrottlingAtOnce) {
  Scenario s;
  Container& box = s.add_container(20);
  Process& p = s.add_process(box);
  s.add_thread(p, [&] {
    kernel_loop(p, s.world, 2 * kMs, 5 * kUs, 2 * kSec);
    box.limit.store(0);
    kernel_loop(p, s.world, 2 * kMs, 5 * kUs, 4 * kSec);
  });
  s.run();
  EXPECT_NEAR(s.world.occupancy(box.id, 1 * kSec, 2 * kSec), 0.20, kTolerance);
  EXPECT_GE(s.world.occupancy(box.id, 2 * kSec + 200 * kMs, 4 * kSec), 0.99);
}

}  // namespace
}  // namespace gpuslice::limiter::sim
