// Priority sharing behind the launch gate on a simulated driver (DriverOps) and a simulated clock,
// over a real container ledger and a real node directory: what a process without a level costs,
// levels set live, the one record per device shared with the compute limit, held-back time, fork.
#include "interposer/priority_sharing.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>

#include "interposer/compute_limit.h"
#include "interposer/devices.h"
#include "interposer/driver_ops.h"
#include "interposer/gate_driver.h"
#include "interposer/launch_gate.h"
#include "interposer/node_presence.h"
#include "limiter/compute_limiter.h"
#include "limiter/priority_gate.h"
#include "shared_state/node_channel.h"

namespace gpuslice::interposer {
namespace {

constexpr std::uint64_t kMs = 1'000'000;

class SimulatedClock final : public Clock {
 public:
  std::uint64_t now_ns() override {
    reads.fetch_add(1);
    return now.load();
  }
  void sleep_ns(std::uint64_t ns) override { now.fetch_add(ns); }
  std::atomic<std::uint64_t> now{monotonic_ns()};
  std::atomic<std::uint64_t> reads{0};
};

struct Simulation {
  static inline std::atomic<int> drains{0};
  static CUresult uuid(CUuuid* out, CUdevice dev) {
    if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
    for (int i = 0; i < 16; ++i) out->bytes[i] = static_cast<char>(0x40 + i);
    return CUDA_SUCCESS;
  }
  static CUresult total(std::size_t* bytes, CUdevice) {
    *bytes = std::size_t{16} << 30;
    return CUDA_SUCCESS;
  }
  static CUresult current_device(CUdevice* dev) {
    *dev = 0;
    return CUDA_SUCCESS;
  }
  static bool no_processes(const char*, nvmlProcessInfo_t*, unsigned* count) {
    *count = 0;
    return true;
  }
  static CUresult ctx_synchronize() {
    drains.fetch_add(1);
    return CUDA_SUCCESS;
  }
  static CUresult stream_synchronize(CUstream) { return ctx_synchronize(); }
};

class PrioritySharing : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/gpuslice-prio-share-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    set_driver_ops({.device_uuid = Simulation::uuid,
                    .device_total_mem = Simulation::total,
                    .current_device = Simulation::current_device,
                    .device_processes = Simulation::no_processes,
                    .gates = {.ctx_synchronize = Simulation::ctx_synchronize,
                              .stream_synchronize = Simulation::stream_synchronize}});
    set_gate_clock(&clock_);
    Simulation::drains.store(0);
  }
  void TearDown() override {
    Runtime* rt = runtime();
    install_runtime(nullptr);
    if (rt != nullptr) {
      for (DeviceState& d : rt->devices) {
        delete d.limiter.load();
        delete d.priority_gate.load();
      }
      delete rt->ledger.load();
    }
    delete rt;  // the presences and boards stay: the library keeps them for the process's life
    g_launch_gated.store(false);
    set_gate_clock(nullptr);
    std::filesystem::remove_all(dir_);
  }

  // A process of a container started with GPUSLICE_PRIORITY=`level` (unset: none) and
  // GPUSLICE_COMPUTE_LIMIT=`compute`, brought up as lifecycle does.
  Runtime& start(std::optional<Priority> level, const std::string& compute = {}) {
    auto* rt = new Runtime();
    if (!compute.empty())
      rt->settings.compute =
          *config::parse_device_values(compute, config::ValueKind::Percent, config::SizeDialect::Native);
    rt->settings.priority = level;
    rt->settings.shared_file = dir_ + "/state";
    rt->settings.limits_file = dir_ + "/limits";
    rt->settings.node_dir = dir_ + "/node";
    rt->container_key = 0x1234;
    auto opened = shm::Ledger::open(rt->settings.shared_file, shm::Ledger::Mode::Process);
    EXPECT_TRUE(opened.ok()) << opened.error();
    rt->ledger.store(std::move(opened).value().release());
    EXPECT_TRUE(rt->ledger.load()->register_process().ok());
    install_runtime(rt);
    assign("priority=high\ncompute=100\n");  // the operator lets this user's containers go up to high
    if (level) rt->ledger.load()->init_priority(*level);
    priority_sharing::refresh();
    if (!rt->settings.compute.empty()) launch_gate::turn_on();
    EXPECT_NE(device_state(0), nullptr);  // attached by the first CUDA call
    return *rt;
  }

  // The node directory's owner (the operator) assigns this process's writer (uid-<euid>).
  void assign(const std::string& text) {
    std::filesystem::create_directories(dir_ + "/node");
    std::filesystem::permissions(dir_ + "/node", std::filesystem::perms(01777));
    std::ofstream(dir_ + "/node/uid-" + std::to_string(geteuid()) + ".assigned") << text;
  }

  static void launch() {
    if (launch_gated()) after_launch(gate_launch(nullptr), nullptr);
  }
  static void tick() {  // the watcher's order (lifecycle.cpp)
    compute_limit::tick();
    priority_sharing::tick();
  }
  static limiter::PriorityGate* gate() { return device_state(0)->priority_gate.load(); }

  // The other containers' records as a reader on the node sees them.
  std::size_t read_records(shm::PeerState* out, std::size_t capacity) {
    auto reader = shm::NodeChannel::open(dir_ + "/node", device_state(0)->uuid, 0x9999, "reader");
    EXPECT_TRUE(reader.ok()) << reader.error();
    return reader.ok() ? reader.value()->read_peers(out, capacity, clock_.now.load()) : 0;
  }

  SimulatedClock clock_;
  std::string dir_;
};

TEST_F(PrioritySharing, AProcessWithoutALevelOrLimitPassesLaunchesStraightThrough) {
  start(std::nullopt);
  EXPECT_FALSE(launch_gated());
  tick();
  EXPECT_FALSE(launch_gated());
  EXPECT_EQ(gate(), nullptr);
  EXPECT_EQ(device_state(0)->presence, nullptr) << "no level, no limit: nothing on the node channel";
  EXPECT_EQ(clock_.reads.load(), 0u);
}

TEST_F(PrioritySharing, ALevelAtStartOpensTheDevicesGateAtTheFirstTick) {
  start(Priority::Low);
  ASSERT_TRUE(launch_gated());
  launch();  // before the first tick: no gate yet, the launch passes
  EXPECT_EQ(gate(), nullptr);
  tick();
  ASSERT_NE(gate(), nullptr);
  EXPECT_EQ(gate()->priority(), Priority::Low);
  launch();
  EXPECT_EQ(gate()->stats().holds, 0u) << "nobody above";
}

TEST_F(PrioritySharing, ALevelSetLiveTurnsTheGateOnAndAChangeAppliesWithoutANewGate) {
  Runtime& rt = start(std::nullopt);
  tick();
  ASSERT_FALSE(launch_gated());
  rt.ledger.load()->set_priority(Priority::Normal);  // gpuslice set --priority normal
  tick();
  ASSERT_TRUE(launch_gated());
  limiter::PriorityGate* first = gate();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->priority(), Priority::Normal);
  rt.ledger.load()->set_priority(Priority::High);
  EXPECT_EQ(first->priority(), Priority::High) << "read live from the ledger, no polling copy";
  tick();
  EXPECT_EQ(gate(), first);
}

// What was found (1): `gpuslice set --priority high` (or GPUSLICE_PRIORITY=high) raised a
// container above its neighbours. The level it runs at is the lower of what it asks and what the
// operator assigned it.
TEST_F(PrioritySharing, GpusliceSetPriorityHighCannotRaiseTheLevelAboveTheAssignedOne) {
  Runtime& rt = start(Priority::Low);
  assign("priority=normal\n");
  tick();
  ASSERT_NE(gate(), nullptr);
  rt.ledger.load()->set_priority(Priority::High);  // gpuslice set --priority high
  tick();
  EXPECT_EQ(gate()->priority(), Priority::Normal);
  launch();
  shm::PeerState seen[4];
  ASSERT_EQ(read_records(seen, 4), 1u);
  EXPECT_EQ(seen[0].priority, Priority::Normal) << "others believe the assigned level too";
  assign("");  // no assignment at all: normal
  tick();
  EXPECT_EQ(gate()->priority(), Priority::Normal);
  rt.ledger.load()->set_priority(Priority::Low);  // lowering is always allowed
  EXPECT_EQ(gate()->priority(), Priority::Low);
}

TEST_F(PrioritySharing, TheContainersOneRecordCarriesItsLevelAndItsComputeLimit) {
  start(Priority::High, "40");
  tick();
  ASSERT_NE(gate(), nullptr);
  launch();  // busy
  shm::PeerState seen[4];
  ASSERT_EQ(read_records(seen, 4), 1u) << "one record per container and device";
  EXPECT_EQ(seen[0].priority, Priority::High);
  EXPECT_EQ(seen[0].compute_limit_percent, 40u);
  EXPECT_GT(seen[0].busy_until_ns, clock_.now.load());
  tick();  // both features publish again: neither erases the other's fields
  ASSERT_EQ(read_records(seen, 4), 1u);
  EXPECT_EQ(seen[0].priority, Priority::High);
  EXPECT_EQ(seen[0].compute_limit_percent, 40u);
  EXPECT_GT(seen[0].busy_until_ns, clock_.now.load());
}

TEST_F(PrioritySharing, TimeHeldBackByABusyHigherContainerReachesTheLedgerAtTheNextTick) {
  Runtime& rt = start(Priority::Low);
  tick();
  ASSERT_NE(gate(), nullptr);
  // A high-priority container on the same GPU, busy for a while.
  auto high = shm::NodeChannel::open(dir_ + "/node", device_state(0)->uuid, 0x77, "high");
  ASSERT_TRUE(high.ok()) << high.error();
  shm::PeerState busy;
  busy.priority = Priority::High;
  busy.heartbeat_ns = clock_.now.load();
  busy.busy_until_ns = clock_.now.load() + 5 * kMs;
  ASSERT_TRUE(high.value()->publish(busy));
  clock_.now.fetch_add(200 * kMs);  // the next full look at the records is due
  busy.heartbeat_ns = clock_.now.load();
  busy.busy_until_ns = clock_.now.load() + 5 * kMs;
  ASSERT_TRUE(high.value()->publish(busy));
  tick();  // the watcher's scan finds it
  launch();
  const std::uint64_t held = gate()->stats().held_back_ns;
  EXPECT_GE(held, 4 * kMs) << "held until the high one's busy time passed";
  EXPECT_EQ(rt.ledger.load()->snapshot().held_back_ns, 0u) << "published by the watcher";
  tick();
  EXPECT_EQ(rt.ledger.load()->snapshot().held_back_ns, held);
  tick();
  EXPECT_EQ(rt.ledger.load()->snapshot().held_back_ns, held) << "published once";
}

TEST_F(PrioritySharing, AForkedChildGetsAGateOfItsOwn) {
  start(Priority::Normal);
  tick();
  limiter::PriorityGate* parents = gate();
  ASSERT_NE(parents, nullptr);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    priority_sharing::after_fork();
    bool ok = gate() == nullptr;
    tick();
    ok = ok && gate() != nullptr && gate() != parents;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(gate(), parents);
}

}  // namespace
}  // namespace gpuslice::interposer
