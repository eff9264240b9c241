#include <gtest/gtest.h>

#include <cstdio>

#include "scenario.h"

namespace gpuslice::limiter::sim {
namespace {

void print(const char* name, unsigned limit, const WindowRange& r) {
  std::printf("%-22s L=%u min=%.3f max=%.3f mean=%.3f\n", name, limit, r.min, r.max, r.mean);
}

TEST(Explore, LongKernel) {
  for (unsigned limit : {20u, 50u, 80u}) {
    Scenario s;
    Container& box = s.add_container(limit);
    Process& p = s.add_process(box);
    s.add_thread(p, [&] {
      kernel_loop(p, s.world, 1 * kMs, 5 * kUs, 2 * kSec);
      p.limiter->gate(nullptr);
      s.world.launch(300 * kMs);
      kernel_loop(p, s.world, 1 * kMs, 5 * kUs, 6 * kSec);
    });
    s.run();
    print("long", limit, s.sliding(box, 0, 6 * kSec));
  }
}

TEST(Explore, CpuGaps) {
  for (bool sync : {true, false}) {
    for (unsigned limit : {20u, 50u, 100u}) {
      Scenario s;
      Container& box = s.add_container(limit);
      Process& p = s.add_process(box);
      int iterations = 0;
      s.add_thread(p, [&] {
        while (s.world.now() < 5 * kSec) {
          p.limiter->gate(nullptr);
          s.world.launch(10 * kMs);
          if (sync) {
            s.world.synchronize();
            p.limiter->note_host_sync();
          } else {
            s.world.sleep(10 * kMs);
          }
          s.world.sleep(40 * kMs);
          ++iterations;
        }
      });
      s.run();
      WindowRange r = s.sliding(box, 0, 5 * kSec);
      std::printf("gaps sync=%d L=%u iterations=%d min=%.3f max=%.3f mean=%.3f\n", sync, limit, iterations, r.min,
                  r.max, r.mean);
    }
  }
}

TEST(Explore, TwoProcesses) {
  for (unsigned limit : {20u, 50u, 80u}) {
    Scenario s;
    Container& box = s.add_container(limit);
    Process& a = s.add_process(box);
    Process& b = s.add_process(box);
    s.add_thread(a, [&] { kernel_loop(a, s.world, 1 * kMs, 5 * kUs, 5 * kSec); });
    s.add_thread(b, [&] { kernel_loop(b, s.world, 3 * kMs, 5 * kUs, 5 * kSec); });
    s.run();
    print("two-proc", limit, s.sliding(box, 0, 5 * kSec));
  }
}

TEST(Explore, TwoThreads) {
  for (unsigned limit : {20u, 50u, 80u}) {
    Scenario s;
    Container& box = s.add_container(limit);
    Process& a = s.add_process(box);
    s.add_thread(a, [&] { kernel_loop(a, s.world, 1 * kMs, 5 * kUs, 5 * kSec); });
    s.add_thread(a, [&] { kernel_loop(a, s.world, 20 * kUs, 5 * kUs, 5 * kSec); });
    s.run();
    print("two-thread", limit, s.sliding(box, 0, 5 * kSec));
  }
}

TEST(Explore, TwoContainers) {
  for (auto [la, lb] : {std::pair{30u, 70u}, std::pair{50u, 50u}, std::pair{20u, 30u}}) {
    Scenario s;
    Container& a = s.add_container(la);
    Container& b = s.add_container(lb);
    Process& pa = s.add_process(a);
    Process& pb = s.add_process(b);
    s.add_thread(pa, [&] { kernel_loop(pa, s.world, 1 * kMs, 5 * kUs, 10 * kSec); });
    s.add_thread(pb, [&] { kernel_loop(pb, s.world, 2 * kMs, 5 * kUs, 10 * kSec); });
    s.run();
    print("ctr-a", la, s.sliding(a, 0, 10 * kSec));
    print("ctr-b", lb, s.sliding(b, 0, 10 * kSec));
  }
}

TEST(Explore, LiveChange) {
  Scenario s;
  Container& box = s.add_container(80);
  Process& p = s.add_process(box);
  s.add_thread(p, [&] { kernel_loop(p, s.world, 2 * kMs, 5 * kUs, 3 * kSec); box.limit.store(20);
     kernel_loop(p, s.world, 2 * kMs, 5 * kUs, 6 * kSec); });
  s.run();
  for (std::uint64_t t = 2 * kSec; t <= 5 * kSec; t += 100 * kMs) {
    std::printf("t=%.1f occ=%.3f\n", t / 1e9, s.world.occupancy(box.id, t, t + kSec));
  }
}

}  // namespace
}  // namespace gpuslice::limiter::sim
