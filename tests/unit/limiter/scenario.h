// Building blocks for limiter scenarios on the simulated device: containers (a shared budget and
// a live limit), processes (a device context with its own limiter), workloads, and sliding-window
// occupancy checks.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "limiter/compute_limiter.h"
#include "shared_state/compute_shared.h"
#include "sim.h"

namespace gpuslice::limiter::sim {

struct Container {
  int id = 0;
  shm::ComputeShared shared{};
  std::atomic<unsigned> limit{0};
};

struct Process {
  int ctx = 0;
  Container* container = nullptr;
  std::unique_ptr<SimClock> clock;
  std::unique_ptr<ComputeLimiter> limiter;
};

struct WindowRange {
  double min = 1.0;
  double max = 0.0;
  double mean = 0.0;
};

inline std::string describe(const WindowRange& range) {
  char text[128];
  std::snprintf(text, sizeof text, "1 s windows: min %.3f max %.3f mean %.3f", range.min, range.max,
                range.mean);
  return text;
}

class Scenario {
 public:
  explicit Scenario(const Tuning& tuning = Tuning{}) : tuning_(tuning) {}

  Container& add_container(unsigned limit) {
    auto container = std::make_unique<Container>();
    container->id = static_cast<int>(containers_.size());
    container->limit.store(limit);
    containers_.push_back(std::move(container));
    return *containers_.back();
  }

  Process& add_process(Container& container, const DriverOps& ops = sim_driver_ops()) {
    auto process = std::make_unique<Process>();
    process->ctx = world.add_context(container.id);
    process->container = &container;
    process->clock = std::make_unique<SimClock>(world);
    process->limiter =
        std::make_unique<ComputeLimiter>(*process->clock, ops, &container.shared, &container.limit, tuning_);
    processes_.push_back(std::move(process));
    return *processes_.back();
  }

  // A thread of `process` running `body`.
  void add_thread(Process& process, std::function<void()> body) {
    world.add_actor(process.ctx, std::move(body));
  }

  void run() { world.run(); }

  // Occupancy of every 1 s window starting in [from, to - 1 s], in steps of 10 ms.
  WindowRange sliding(const Container& container, std::uint64_t from, std::uint64_t to,
                      std::uint64_t window = kSec) const {
    WindowRange range;
    double sum = 0;
    int count = 0;
    for (std::uint64_t t = from; t + window <= to; t += 10 * kMs) {
      const double occupancy = world.occupancy(container.id, t, t + window);
      range.min = std::min(range.min, occupancy);
      range.max = std::max(range.max, occupancy);
      sum += occupancy;
      ++count;
    }
    range.mean = count > 0 ? sum / count : 0.0;
    return range;
  }

  // Work done by `process` over every 1 s window starting in [from, to - 1 s], relative to
  // `baseline_rate` (work per ns of the same workload unthrottled).
  WindowRange sliding_throughput(const Process& process, double baseline_rate, std::uint64_t from,
                                 std::uint64_t to, std::uint64_t window = kSec) const {
    WindowRange range;
    double sum = 0;
    int count = 0;
    for (std::uint64_t t = from; t + window <= to; t += 10 * kMs) {
      const double ratio =
          world.work_done(process.ctx, t, t + window) / (baseline_rate * static_cast<double>(window));
      range.min = std::min(range.min, ratio);
      range.max = std::max(range.max, ratio);
      sum += ratio;
      ++count;
    }
    range.mean = count > 0 ? sum / count : 0.0;
    return range;
  }

  World world;

 private:
  Tuning tuning_;
  std::vector<std::unique_ptr<Container>> containers_;
  std::vector<std::unique_ptr<Process>> processes_;
};

// One launch as the library's hooks make it: the gate, the kernel, and the gate's after-launch call
// when it probes this launch (its timing events around the kernel).
inline void gated_launch(Process& process, World& world, std::uint64_t kernel_ns) {
  const bool probed = process.limiter->gate(nullptr);
  world.launch(kernel_ns);
  if (probed) process.limiter->after_launch(nullptr);
}

// Launch loop: gate, one kernel of `kernel_ns`, `cpu_ns` of host work, until virtual `until`.
inline void kernel_loop(Process& process, World& world, std::uint64_t kernel_ns, std::uint64_t cpu_ns,
                        std::uint64_t until) {
  while (world.now() < until) {
    gated_launch(process, world, kernel_ns);
    world.sleep(cpu_ns);
  }
}

}  // namespace gpuslice::limiter::sim
