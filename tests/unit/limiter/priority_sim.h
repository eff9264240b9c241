// Building blocks for priority-sharing scenarios on the simulated device (sim.h): a node board
// where containers publish their state (the node channel's fake), containers with a priority and
// a gate per process, and the workloads of bench/gpu/priority_bench.py in miniature: a request
// server with Poisson arrivals and a trainer.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <vector>

#include "limiter/priority_gate.h"
#include "scenario.h"

namespace gpuslice::limiter::sim {

// Every container's last published record, as the node channel would hold them.
class Board {
 public:
  class Handle final : public PeerBoard {
   public:
    Handle(Board& board, int id) : board_(board), id_(id) {}
    std::size_t read_peers(PeerView* out, std::size_t capacity, std::uint64_t now_ns,
                           std::uint64_t stale_ns) override {
      std::lock_guard<std::mutex> lock(board_.mutex_);
      ++reads;
      std::size_t count = 0;
      for (std::size_t i = 0; i < board_.records_.size() && count < capacity; ++i) {
        if (static_cast<int>(i) == id_ || !board_.present_[i]) continue;
        const PeerView& record = board_.records_[i];
        if (record.heartbeat_ns + stale_ns < now_ns) continue;
        out[count++] = record;
      }
      return count;
    }
    void publish(const PeerView& own) override {
      std::lock_guard<std::mutex> lock(board_.mutex_);
      board_.records_[static_cast<std::size_t>(id_)] = own;
      board_.present_[static_cast<std::size_t>(id_)] = true;
    }
    std::uint64_t reads = 0;

   private:
    Board& board_;
    int id_;
  };

  std::unique_ptr<Handle> handle(int container) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto size = static_cast<std::size_t>(container) + 1;
    if (records_.size() < size) {
      records_.resize(size);
      present_.resize(size, false);
    }
    return std::make_unique<Handle>(*this, container);
  }

  PeerView record(int container) {
    std::lock_guard<std::mutex> lock(mutex_);
    return records_[static_cast<std::size_t>(container)];
  }

 private:
  std::mutex mutex_;
  std::vector<PeerView> records_;
  std::vector<bool> present_;
};

// One process of a container with both gates: the priority gate first, then the compute limiter
// (a limit stays a ceiling).
struct Tenant {
  Container* container = nullptr;
  Process* process = nullptr;
  std::atomic<std::uint32_t> priority{static_cast<std::uint32_t>(Priority::Normal)};
  std::unique_ptr<Board::Handle> board;
  std::unique_ptr<PriorityGate> gate;  // null: no priority anywhere, the hooks skip it
  std::atomic<bool> alive{true};

  // A launch as the hooks make it: both gates, then priority sharing's device-share timing (its
  // pair around the launch only), the launch, and the timing's closing event.
  void launch(World& world, std::uint64_t kernel_ns) {
    const std::uint64_t waited = gate ? gate->gate(nullptr) : 0;
    const bool probed = process->limiter->gate(nullptr, waited);
    const bool timed = gate && gate->time_launch(nullptr);
    world.launch(kernel_ns);
    if (timed) gate->after_launch(nullptr);
    if (probed) process->limiter->after_launch(nullptr);
  }
};

class PriorityScenario {
 public:
  explicit PriorityScenario(const PriorityTuning& tuning = PriorityTuning{}) : tuning_(tuning) {}

  // `managed` false: the tenant runs without a priority gate (un-managed sharing).
  Tenant& add_tenant(Priority priority, unsigned compute_limit = 0, bool managed = true) {
    auto tenant = std::make_unique<Tenant>();
    Container& box = scenario.add_container(compute_limit);
    tenant->container = &box;
    tenant->process = &scenario.add_process(box);
    tenant->priority.store(static_cast<std::uint32_t>(priority));
    if (managed) {
      tenant->board = board.handle(box.id);
      clocks_.push_back(std::make_unique<SimClock>(scenario.world));
      tenant->gate = std::make_unique<PriorityGate>(*clocks_.back(), ops, tenant->board.get(),
                                                    &tenant->priority, tuning_);
    }
    tenants_.push_back(std::move(tenant));
    return *tenants_.back();
  }

  // Gates added from now on step with events (sim_driver_ops_pipelined) instead of drains.
  void pipelined_steps() { ops = sim_driver_ops_pipelined(); }
  DriverOps ops = sim_driver_ops();

  void add_thread(Tenant& tenant, std::function<void()> body) {
    scenario.add_thread(*tenant.process, std::move(body));
  }

  // The watcher thread of a managed tenant: a heartbeat every 100 ms until `until` or until the
  // tenant is killed.
  void add_heartbeat(Tenant& tenant, std::uint64_t until) {
    if (!tenant.gate) return;
    scenario.add_thread(*tenant.process, [this, &tenant, until] {
      while (world().now() < until && tenant.alive.load()) {
        tenant.gate->heartbeat();
        world().sleep(100 * kMs);
      }
    });
  }

  void run() { scenario.run(); }
  World& world() { return scenario.world; }

  Scenario scenario;
  Board board;

 private:
  PriorityTuning tuning_;
  std::vector<std::unique_ptr<SimClock>> clocks_;
  std::vector<std::unique_ptr<Tenant>> tenants_;
};

// A request: `prep_ns` of host work before its first launch (taking it, preparing its input),
// `kernels` kernels of `kernel_ns`, `cpu_ns` of host work after each launch, then a host
// synchronisation (what a model's forward pass and reading its result do).
struct RequestShape {
  int kernels = 20;
  std::uint64_t kernel_ns = 250 * kUs;
  std::uint64_t cpu_ns = 10 * kUs;
  std::uint64_t prep_ns = 0;
};

// Poisson arrival times in [0, until) at `rate_per_s`, deterministic for a seed.
inline std::vector<std::uint64_t> poisson_arrivals(double rate_per_s, std::uint64_t from, std::uint64_t until,
                                                   std::uint64_t seed) {
  std::mt19937_64 random(seed);
  std::vector<std::uint64_t> arrivals;
  double t = static_cast<double>(from);
  for (;;) {
    const double u = static_cast<double>(random() >> 11) * (1.0 / 9007199254740992.0);
    t += -std::log(1.0 - u) / rate_per_s * 1e9;
    if (t >= static_cast<double>(until)) break;
    arrivals.push_back(static_cast<std::uint64_t>(t));
  }
  return arrivals;
}

// Serves requests in arrival order (one at a time, as a single-threaded server does); records
// each request's latency from its arrival to the end of its synchronisation.
inline void serve(Tenant& tenant, World& world, const std::vector<std::uint64_t>& arrivals,
                  const RequestShape& shape, std::vector<std::uint64_t>* latencies) {
  for (const std::uint64_t arrival : arrivals) {
    if (world.now() < arrival) world.sleep(arrival - world.now());
    if (shape.prep_ns != 0) world.sleep(shape.prep_ns);
    for (int k = 0; k < shape.kernels; ++k) {
      tenant.launch(world, shape.kernel_ns);
      world.sleep(shape.cpu_ns);
    }
    if (tenant.gate) tenant.gate->note_sync_begin();
    world.synchronize();
    if (tenant.gate) tenant.gate->note_host_sync();
    latencies->push_back(world.now() - arrival);
  }
}

// Training steps: `kernels` kernels of `kernel_ns` per step with `cpu_ns` of host work after each
// launch, then a synchronisation (reading the loss), until `until`.
inline void train(Tenant& tenant, World& world, int kernels, std::uint64_t kernel_ns, std::uint64_t cpu_ns,
                  std::uint64_t until) {
  while (world.now() < until) {
    for (int k = 0; k < kernels && world.now() < until; ++k) {
      tenant.launch(world, kernel_ns);
      world.sleep(cpu_ns);
    }
    if (tenant.gate) tenant.gate->note_sync_begin();
    world.synchronize();
    if (tenant.gate) tenant.gate->note_host_sync();
  }
}

inline std::uint64_t percentile(std::vector<std::uint64_t> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto index = static_cast<std::size_t>(std::ceil(p * static_cast<double>(values.size()))) - 1;
  return values[std::min(index, values.size() - 1)];
}

}  // namespace gpuslice::limiter::sim
