#include <gtest/gtest.h>

#include <cstdio>

#include "scenario.h"

namespace gpuslice::limiter::sim {
namespace {

TEST(Explore, Print) {
  struct Case { const char* name; std::uint64_t kernel, cpu; };
  for (Case c : {Case{"10ms", 10 * kMs, 5 * kUs}, Case{"5us", 5 * kUs, 2 * kUs}, Case{"cpu-bound", 3 * kUs, 6 * kUs}}) {
    for (unsigned limit : {20u, 50u, 80u}) {
      Scenario s;
      Container& box = s.add_container(limit);
      Process& p = s.add_process(box);
      s.add_thread(p, [&] { kernel_loop(p, s.world, c.kernel, c.cpu, 4 * kSec); });
      s.run();
      WindowRange r = s.sliding(box, 0, 4 * kSec);
      auto st = p.limiter->stats();
      std::printf("%-10s L=%u min=%.3f max=%.3f mean=%.3f windows=%llu\n", c.name, limit, r.min, r.max, r.mean,
                  (unsigned long long)st.windows);
    }
  }
}

}  // namespace
}  // namespace gpuslice::limiter::sim
