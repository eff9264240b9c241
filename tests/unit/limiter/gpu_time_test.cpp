// A compute limit caps GPU time, the time the container's kernels occupy the device, not the wall
// time its launches span: on the simulated device (whose timing events follow its own timeline),
// launch-bound work below its limit runs at full speed, while device-bound and mixed work above it
// is held to the limit.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <string>

#include "scenario.h"

namespace gpuslice::limiter::sim {
namespace {

constexpr std::uint64_t kRun = 4 * kSec;

// One step of a launch-bound loop (the shape of batch-1 decoding): `kernels` kernels of `kernel_ns`
// launched back to back, optionally one longer kernel first, then `host_ns` of host work.
struct Step {
  int kernels = 10;
  std::uint64_t kernel_ns = 5 * kUs;
  std::uint64_t long_kernel_ns = 0;
  std::uint64_t host_ns = 500 * kUs;
  bool sync = false;                 // the step ends by waiting for its work (as reading a token does)
  std::uint64_t launch_host_ns = 0;  // host work after each kernel launch (a Python loop's)
};

int run_steps(Process& p, World& world, const Step& step, std::uint64_t until) {
  int steps = 0;
  while (world.now() < until) {
    if (step.long_kernel_ns != 0) gated_launch(p, world, step.long_kernel_ns);
    for (int i = 0; i < step.kernels; ++i) {
      gated_launch(p, world, step.kernel_ns);
      if (step.launch_host_ns != 0) world.sleep(step.launch_host_ns);
    }
    if (step.sync) {
      world.synchronize();
      p.limiter->note_host_sync();
    }
    world.sleep(step.host_ns);
    ++steps;
  }
  return steps;
}

struct StepResult {
  int steps = 0;
  WindowRange occupancy;
};

StepResult limited_steps(unsigned limit, const Step& step, const Tuning& tuning = Tuning{}) {
  Scenario s(tuning);
  Container& box = s.add_container(limit);
  Process& p = s.add_process(box);
  StepResult result;
  s.add_thread(p, [&] { result.steps = run_steps(p, s.world, step, kRun); });
  s.run();
  result.occupancy = s.sliding(box, 0, kRun);
  return result;
}

class LimiterGpuTime : public ::testing::TestWithParam<unsigned> {};

// The case: 10 x 5 us kernels and 0.5 ms of host work per step keep the device busy 9% of
// the time. The old definition charged the whole launch-to-drain interval (about 53% of the steps
// under 50%); by GPU time the loop is below every limit here.
TEST_P(LimiterGpuTime, LaunchBoundStepsBelowTheLimitRunAtFullSpeed) {
  const unsigned limit = GetParam();
  const Step step;
  const int free_running = limited_steps(0, step).steps;
  const StepResult limited = limited_steps(limit, step);
  EXPECT_GE(limited.steps, free_running * 97 / 100) << limited.steps << " of " << free_running;
  EXPECT_LE(limited.occupancy.max, limit / 100.0 + 0.03) << describe(limited.occupancy);
}

// GPUSLICE_COMPUTE_BUSY=launches: no event is recorded and windows are charged their wall time,
// the definition before GPU time (the same loop then runs at about its limit of its steps).
TEST(LimiterGpuTimeOff, WithoutTimedLaunchesTheLaunchBoundLoopIsChargedItsWallTime) {
  const Step step;
  const int free_running = limited_steps(0, step).steps;
  Tuning tuning;
  tuning.time_launches = false;
  const int charged_wall = limited_steps(50, step, tuning).steps;
  EXPECT_LT(charged_wall, free_running * 70 / 100) << charged_wall << " of " << free_running;
  EXPECT_GE(limited_steps(50, step).steps, free_running * 97 / 100);
}

// A window of thousands of cheap launches has a small share of them timed (two event records each
// slow the host), a window of a few long kernels all of its launches.
TEST(LimiterGpuTimeCost, FewOfManyCheapLaunchesAreTimed) {
  Scenario s;
  s.world.event_record_host_ns = 1 * kUs;
  Container& box = s.add_container(90);
  Process& p = s.add_process(box);
  s.add_thread(p, [&] {
    while (s.world.now() < kSec) {
      for (int i = 0; i < 256; ++i) {  // empty kernels at the launch rate of a real driver
        gated_launch(p, s.world, 2 * kUs);
        s.world.sleep(3300);
      }
      s.world.synchronize();
      p.limiter->note_host_sync();
    }
  });
  s.run();
  const Stats stats = p.limiter->stats();
  ASSERT_GT(stats.launches, 100'000U);
  EXPECT_LT(stats.timed_launches * 100, stats.launches * 2)
      << stats.timed_launches << " of " << stats.launches;
  EXPECT_GT(stats.timed_launches, 0U);
}

// Windows not timed are charged the last duty measured. Work that turns device-bound after a
// launch-bound phase must not ride on that light duty: the queue left at their close says so, and
// the container is held to its limit from the next second on.
TEST(LimiterGpuTimeCost, DeviceBoundWorkAfterALaunchBoundPhaseIsHeld) {
  Scenario s;
  Container& box = s.add_container(30);
  Process& p = s.add_process(box);
  const Step light;
  s.add_thread(p, [&] {
    run_steps(p, s.world, light, 2 * kSec);
    kernel_loop(p, s.world, 200 * kUs, 2 * kUs, 5 * kSec);
  });
  s.run();
  const WindowRange heavy = s.sliding(box, 3 * kSec, 5 * kSec);
  EXPECT_LE(heavy.max, 0.33) << describe(heavy);
  EXPECT_GE(heavy.mean, 0.25) << describe(heavy);  // held, not starved
  const Stats stats = p.limiter->stats();
  EXPECT_LT(stats.timed_launches * 100, stats.launches * 10)
      << stats.timed_launches << " of " << stats.launches;
}

// The same with a host sync ending each step, as a decode loop reading its token does.
TEST_P(LimiterGpuTime, LaunchBoundStepsWithAHostSyncRunAtFullSpeed) {
  Step step;
  step.sync = true;
  const int free_running = limited_steps(0, step).steps;
  const StepResult limited = limited_steps(GetParam(), step);
  EXPECT_GE(limited.steps, free_running * 97 / 100) << limited.steps << " of " << free_running;
}

// Batch-1 decoding as a GPU runs it: each token launches 300 kernels of 4 us from Python (10 us of
// host work after each), reads the token back, then spends 3 ms on the host. The device is busy 20%
// of the time, 40% within the launching part, and a window's probe times only its first 128
// launches: the window closes at the host gap after the token, so that duty is charged over the
// launching part alone and the loop runs free under 30%.
TEST(LimiterGpuTimeProbe, ADecodeLoopOfLongTokensBelowItsLimitRunsFree) {
  Step step;
  step.kernels = 300;
  step.kernel_ns = 4 * kUs;
  step.launch_host_ns = 10 * kUs;
  step.sync = true;
  step.host_ns = 3 * kMs;
  const int free_running = limited_steps(0, step).steps;
  const StepResult limited = limited_steps(30, step);
  EXPECT_GE(limited.steps, free_running * 95 / 100) << limited.steps << " of " << free_running;
  EXPECT_LE(limited.occupancy.max, 0.33) << describe(limited.occupancy);
}

// Batch-1 decoding with the token's launches uneven: 150 kernels of 4 us launched every 10 us (the
// layers), then 10 launched 400 us apart (sampling and the rest of the Python loop), then the token
// is read back; no pause of a millisecond anywhere, so windows span both parts. Each launch call
// takes the host `launch_host_ns` before its kernel reaches the device. Returns the tokens decoded
// in kRun and the container's 1 s windows of device occupancy from `from`.
struct UnevenDecode {
  int steps = 0;
  WindowRange occupancy;
};

UnevenDecode uneven_decode(unsigned limit, std::uint64_t launch_host_ns, std::uint64_t from) {
  Scenario sc;
  sc.world.launch_host_ns = launch_host_ns;
  sc.world.event_record_host_ns = launch_host_ns == 0 ? 0 : 1 * kUs;
  Container& box = sc.add_container(limit);
  Process& p = sc.add_process(box);
  UnevenDecode result;
  sc.add_thread(p, [&] {
    while (sc.world.now() < kRun) {
      for (int i = 0; i < 150; ++i) {
        gated_launch(p, sc.world, 4 * kUs);
        sc.world.sleep(10 * kUs);
      }
      for (int i = 0; i < 10; ++i) {
        gated_launch(p, sc.world, 4 * kUs);
        sc.world.sleep(400 * kUs);
      }
      sc.world.synchronize();
      p.limiter->note_host_sync();
      ++result.steps;
    }
  });
  sc.run();
  result.occupancy = sc.sliding(box, from, kRun);
  return result;
}

// The device is busy 12% of the time, 40% while the layers are launched. A probe that timed only a
// window's first launches saw the layers' duty and charged it over the window (0.86 of the steps
// under 20%, 1 s windows at 0.094-0.107 of the device against 0.116 free; on an H200 the decode loop
// ran at 0.68 under 20% and 0.88 under 30%). Timing every stride-th launch to the window's close
// charges what ran: after the first second (the first windows, before a duty is known, are charged
// in full) it runs as it does free.
TEST(LimiterGpuTimeProbe, ADecodeLoopThatLaunchesDenselyFirstIsChargedWhatItsWholeWindowRan) {
  const UnevenDecode free_running = uneven_decode(0, 0, kSec);
  for (const unsigned limit : {20U, 30U}) {
    const UnevenDecode limited = uneven_decode(limit, 0, kSec);
    EXPECT_GE(limited.steps, free_running.steps * 95 / 100)
        << "under " << limit << "%: " << limited.steps << " of " << free_running.steps;
    EXPECT_GE(limited.occupancy.min, 0.97 * free_running.occupancy.min)
        << "under " << limit << "%: the least 1 s window after the first second";
  }
}

// The same loop where each launch call costs the host 6 us before its 4 us kernel reaches the
// device, as on a real driver: a pair of events begun on the idle queue completes its first event
// at once, so it spans the launch call as well as the kernel (10 us for 4). On an H200 the decode
// loop's pairs added up to 22% of the device while NVML saw it 7-10% busy, and it ran at 0.56 of its
// speed under 20%. The launch call's host time is taken off pairs begun on an idle stream: the loop,
// 10% busy, runs free under 20% and 30%.
TEST(LimiterGpuTimeProbe, ADecodeLoopIsNotChargedTheHostTimeOfItsLaunchCalls) {
  const UnevenDecode free_running = uneven_decode(0, 6 * kUs, 0);
  EXPECT_LT(free_running.occupancy.mean, 0.12);
  for (const unsigned limit : {20U, 30U}) {
    const UnevenDecode limited = uneven_decode(limit, 6 * kUs, 0);
    EXPECT_GE(limited.steps, free_running.steps * 95 / 100)
        << "under " << limit << "%: " << limited.steps << " of " << free_running.steps;
  }
}

// Device-bound work whose launch calls take the host as long as a kernel runs: the queue still
// holds the previous kernel when a pair begins, so the pair is left whole and the limit holds.
TEST_P(LimiterGpuTime, DeviceBoundWorkWithSlowLaunchCallsIsHeldWithinThreePoints) {
  const unsigned limit = GetParam();
  const double share = limit / 100.0;
  Scenario s;
  s.world.launch_host_ns = 6 * kUs;
  s.world.event_record_host_ns = 1 * kUs;
  Container& box = s.add_container(limit);
  Process& p = s.add_process(box);
  s.add_thread(p, [&] { kernel_loop(p, s.world, 20 * kUs, 2 * kUs, kRun); });
  s.run();
  const WindowRange occupancy = s.sliding(box, 0, kRun);
  EXPECT_GE(occupancy.min, share - 0.03) << describe(occupancy);
  EXPECT_LE(occupancy.max, share + 0.03) << describe(occupancy);
}

// Mixed: one 150 us kernel and ten 5 us ones per 0.5 ms step keep the device busy 40% of the time.
// Above that limit it runs at full speed; at 20% it is held to 20% of GPU time.
TEST_P(LimiterGpuTime, MixedStepsAreHeldToTheLimitOnlyAboveIt) {
  const unsigned limit = GetParam();
  Step step;
  step.long_kernel_ns = 150 * kUs;
  const int free_running = limited_steps(0, step).steps;
  const StepResult limited = limited_steps(limit, step);
  const double share = limit / 100.0;
  EXPECT_LE(limited.occupancy.max, share + 0.03) << describe(limited.occupancy);
  if (share > 0.40) {
    EXPECT_GE(limited.steps, free_running * 97 / 100) << limited.steps << " of " << free_running;
  } else {
    EXPECT_GE(limited.occupancy.min, share - 0.03) << describe(limited.occupancy);
  }
}

// Device-bound work (the queue never empties) is held to the limit within 3 points in every
// second, long kernels and a tight loop of tiny ones alike.
TEST_P(LimiterGpuTime, DeviceBoundWorkIsHeldWithinThreePoints) {
  const unsigned limit = GetParam();
  const double share = limit / 100.0;
  for (const std::uint64_t kernel_ns : {1 * kMs, 5 * kUs}) {
    Scenario s;
    Container& box = s.add_container(limit);
    Process& p = s.add_process(box);
    s.add_thread(p, [&] { kernel_loop(p, s.world, kernel_ns, 2 * kUs, kRun); });
    s.run();
    const WindowRange occupancy = s.sliding(box, 0, kRun);
    EXPECT_GE(occupancy.min, share - 0.03) << kernel_ns << " ns kernels: " << describe(occupancy);
    EXPECT_LE(occupancy.max, share + 0.03) << kernel_ns << " ns kernels: " << describe(occupancy);
  }
}

// Device-bound mix: one 200 us kernel then sixteen 3 us ones, 5 us of host work per launch, so the
// host runs ahead of the device and the queue never empties. A real cuEventRecord costs the host
// microseconds: the probe's two per launch made the probed launches host-bound (the device idle
// between steps while probed, never otherwise), and the window was charged that lower duty.
TEST_P(LimiterGpuTime, DeviceBoundMixIsHeldDespiteTheProbesHostCost) {
  const unsigned limit = GetParam();
  const double share = limit / 100.0;
  Scenario s;
  s.world.event_record_host_ns = 6 * kUs;
  Container& box = s.add_container(limit);
  Process& p = s.add_process(box);
  s.add_thread(p, [&] {
    while (s.world.now() < kRun) {
      gated_launch(p, s.world, 200 * kUs);
      s.world.sleep(5 * kUs);
      for (int i = 0; i < 16; ++i) {
        gated_launch(p, s.world, 3 * kUs);
        s.world.sleep(5 * kUs);
      }
    }
  });
  s.run();
  const WindowRange occupancy = s.sliding(box, 0, kRun);
  EXPECT_GE(occupancy.min, share - 0.03) << describe(occupancy);
  EXPECT_LE(occupancy.max, share + 0.03) << describe(occupancy);
}

INSTANTIATE_TEST_SUITE_P(Limits, LimiterGpuTime, ::testing::Values(20u, 50u, 80u));

// A container taking turns with others on the GPU opens its device-bound windows only in its turn.
// Launch-bound work runs outside it too: after its first window (which waits for the turn once),
// each window is measured light and the next opens at once.
TEST(LimiterGpuTimeTurns, LaunchBoundStepsRunOutsideTheirTurn) {
  const Step step;
  const int free_running = limited_steps(0, step).steps;
  Scenario s;
  Container& box = s.add_container(50);
  Process& p = s.add_process(box);
  std::atomic<std::uint64_t> phase{Tuning{}.period_ns / 2};  // the turn starts 250 ms into the cycle
  p.limiter->set_phase_source(&phase);
  int steps = 0;
  s.add_thread(p, [&] { steps = run_steps(p, s.world, step, kRun); });
  s.run();
  EXPECT_GE(steps, free_running * 9 / 10) << steps << " of " << free_running;
  EXPECT_LE(s.sliding(box, 0, kRun).max, 0.50 + 0.03);
}

// Two threads of one process, each running the launch-bound steps (together 18% busy): the probe
// times both threads' launches, so a 50% limit leaves them alone.
TEST(LimiterGpuTimeThreads, LaunchBoundThreadsOfOneProcessRunAtFullSpeed) {
  const Step step;
  const int free_running = limited_steps(0, step).steps;
  Scenario s;
  Container& box = s.add_container(50);
  Process& p = s.add_process(box);
  int steps_a = 0;
  int steps_b = 0;
  s.add_thread(p, [&] { steps_a = run_steps(p, s.world, step, kRun); });
  s.add_thread(p, [&] {
    s.world.sleep(250 * kUs);
    steps_b = run_steps(p, s.world, step, kRun);
  });
  s.run();
  EXPECT_GE(steps_a + steps_b, 2 * free_running * 95 / 100)
      << steps_a << " + " << steps_b << " of 2 x " << free_running;
  EXPECT_LE(s.sliding(box, 0, kRun).max, 0.50 + 0.03);
}

// Two launch-bound processes of one container, each busy 30% of the time: each charges its own
// kernels' device time, so a 70% limit leaves them alone, and under 50% together they never exceed
// it. They get less than it: once throttled they resume together, their kernels share the device,
// and each probe counts the other's share as its own (an overestimate, never an underestimate).
TEST(LimiterGpuTimeProcesses, LaunchBoundProcessesAddUp) {
  Step step;
  step.kernels = 3;
  step.kernel_ns = 50 * kUs;
  for (const unsigned limit : {50u, 70u}) {
    Scenario s;
    Container& box = s.add_container(limit);
    Process& a = s.add_process(box);
    Process& b = s.add_process(box);
    int steps_a = 0;
    int steps_b = 0;
    s.add_thread(a, [&] { steps_a = run_steps(a, s.world, step, kRun); });
    s.add_thread(b, [&] {
      s.world.sleep(250 * kUs);  // out of phase: each kernel runs alone, as in most of a real run
      steps_b = run_steps(b, s.world, step, kRun);
    });
    s.run();
    const WindowRange occupancy = s.sliding(box, 0, kRun);
    const int free_running = limited_steps(0, step).steps;
    if (limit == 50) {
      EXPECT_LE(occupancy.max, 0.50 + 0.03) << describe(occupancy);
      EXPECT_GE(occupancy.mean, 0.25) << describe(occupancy);
    } else {
      EXPECT_GE(steps_a + steps_b, 2 * free_running * 95 / 100) << steps_a << " + " << steps_b;
    }
  }
}

}  // namespace
}  // namespace gpuslice::limiter::sim

namespace gpuslice::limiter::sim {
namespace {

// Found on an H200 (four threads on four streams, `gpuslice set --compute 20` on a process that ran
// unlimited): the work queued while unlimited, up to the driver's queue depth, was charged to the
// new limit at its first window, and the process stalled 1.6 s. Work launched before a limit
// applied is drained, not charged to it: the limit holds from the next second on.
TEST(LimiterGpuTimeLive, WorkQueuedWhileUnlimitedIsNotChargedToANewLimit) {
  Scenario s;
  Container& box = s.add_container(0);  // unlimited
  Process& p = s.add_process(box);
  s.add_thread(p, [&] { kernel_loop(p, s.world, 200 * kUs, 2 * kUs, 4 * kSec); });
  s.add_thread(p, [&] {  // the operator's `gpuslice set --compute 20` after 1 s
    s.world.sleep(kSec);
    box.limit.store(20);
  });
  s.run();
  const WindowRange after = s.sliding(box, kSec + 300 * kMs, 4 * kSec);
  EXPECT_GE(after.min, 0.17) << describe(after);
  EXPECT_LE(after.max, 0.23) << describe(after);
}

// The same when the limit was lifted while the process waited between windows (a limited process
// is off most of the time, so the operator's `set --compute 100` usually finds it there): the queue
// the unlimited stretch leaves is still not charged to the next limit. Charged, 200 ms of it made a
// container at 20% stall for a second (four streams' deeper queue: 750 ms at 30% on an H200).
TEST(LimiterGpuTimeLive, WorkQueuedAfterALimitLiftedBetweenWindowsIsNotChargedToTheNextOne) {
  Scenario s;
  Container& box = s.add_container(20);
  Process& p = s.add_process(box);
  s.add_thread(p, [&] { kernel_loop(p, s.world, 200 * kUs, 2 * kUs, 5 * kSec); });
  s.add_thread(p, [&] {
    s.world.sleep(kSec + 300 * kMs);  // in the off part of a 500 ms cycle at 20%
    box.limit.store(100);
    s.world.sleep(kSec);
    box.limit.store(20);
  });
  s.run();
  const WindowRange after = s.sliding(box, 2 * kSec + 300 * kMs + 300 * kMs, 5 * kSec);
  EXPECT_GE(after.min, 0.17) << describe(after);
  EXPECT_LE(after.max, 0.23) << describe(after);
}

}  // namespace
}  // namespace gpuslice::limiter::sim
