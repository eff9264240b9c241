// The simulated device's own behaviour that the limiter and the priority gate depend on: how
// contexts share the device, under processor sharing and under time-slicing.
#include "sim.h"

#include <gtest/gtest.h>

namespace gpuslice::limiter::sim {
namespace {

// Two contexts each launch one 5 ms kernel at 0; returns when each finished (its event's time).
std::pair<std::uint64_t, std::uint64_t> two_long_kernels(std::uint64_t timeslice_ns) {
  World world;
  world.timeslice_ns = timeslice_ns;
  std::uint64_t done[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    const int ctx = world.add_context(i);
    world.add_actor(ctx, [&world, &done, i] {
      const int event = world.create_event();
      world.launch(5 * kMs);
      world.record_event(event);
      world.synchronize();
      world.event_time(event, &done[i]);
    });
  }
  world.run();
  return {done[0], done[1]};
}

TEST(SimDevice, UnderProcessorSharingTwoContextsFinishTogether) {
  const auto [a, b] = two_long_kernels(0);
  EXPECT_NEAR(static_cast<double>(a), 10.0 * kMs, 2.0);
  EXPECT_NEAR(static_cast<double>(b), 10.0 * kMs, 2.0);
}

TEST(SimDevice, TimeSlicedContextsTakeTurnsOfASlice) {
  // A 0-2, B 2-4, A 4-6, B 6-8, A 8-9 (done), B 9-10 (done).
  const auto [a, b] = two_long_kernels(2 * kMs);
  EXPECT_NEAR(static_cast<double>(a), 9.0 * kMs, 2.0);
  EXPECT_NEAR(static_cast<double>(b), 10.0 * kMs, 2.0);
}

// A 5 us kernel launched at 1 ms beside a context that runs 10 ms of work: when it finished.
std::uint64_t short_kernel_beside_a_long_one(std::uint64_t timeslice_ns) {
  World world;
  world.timeslice_ns = timeslice_ns;
  std::uint64_t done = 0;
  world.add_actor(world.add_context(0), [&world] {
    world.launch(10 * kMs);
    world.synchronize();
  });
  world.add_actor(world.add_context(1), [&world, &done] {
    world.sleep(kMs);
    const int event = world.create_event();
    world.launch(5 * kUs);
    world.record_event(event);
    world.synchronize();
    world.event_time(event, &done);
  });
  world.run();
  return done;
}

TEST(SimDevice, WorkArrivingWhileAnotherContextRunsWaitsForItsSlice) {
  // Shared: the short kernel runs at half speed at once. Sliced: it waits for the running
  // context's slice, which starts over when the contention begins, as the driver's does.
  EXPECT_NEAR(static_cast<double>(short_kernel_beside_a_long_one(0)), 1.0 * kMs + 10 * kUs, 2.0);
  EXPECT_NEAR(static_cast<double>(short_kernel_beside_a_long_one(2 * kMs)), 3.0 * kMs + 5 * kUs, 2.0);
}

TEST(SimDevice, AContextAloneIsNeverSliced) {
  World world;
  world.timeslice_ns = kMs;
  std::uint64_t done = 0;
  world.add_actor(world.add_context(0), [&world, &done] {
    const int event = world.create_event();
    for (int i = 0; i < 10; ++i) world.launch(700 * kUs);
    world.record_event(event);
    world.synchronize();
    world.event_time(event, &done);
  });
  world.run();
  EXPECT_NEAR(static_cast<double>(done), 7.0 * kMs, 2.0);
}

}  // namespace
}  // namespace gpuslice::limiter::sim
