// The compute limit behind the launch gate on a simulated driver (CoreDriver) and a simulated clock over a
// real container ledger: what an unlimited device costs, live limits, late devices, graph capture, busy time,
// fork.
#include "interposer/compute_limit.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>

#include "../test_units.h"
#include "interposer/core_driver.h"
#include "interposer/devices.h"
#include "interposer/gate_driver.h"
#include "interposer/launch_gate.h"
#include "interposer/mps_client.h"
#include "limiter/compute_limiter.h"
#include "simulated_driver.h"

namespace gpuslice::interposer {
namespace {

constexpr std::uint64_t kUs = 1000;
using test_units::kMs;

CUstream stream_handle(std::uintptr_t value) { return reinterpret_cast<CUstream>(value); }

class ComputeLimit : public SimulatedProcess {
 protected:
  void SetUp() override {
    SimulatedProcess::SetUp();
    set_core_driver({.device_uuid = SimulatedDriver::uuid,
                     .device_total_mem = SimulatedDriver::total,
                     .current_device = SimulatedDriver::current_device,
                     .device_processes = SimulatedDriver::list,
                     .gates = {.ctx_synchronize = SimulatedDriver::ctx_synchronize,
                               .stream_synchronize = SimulatedDriver::stream_synchronize,
                               .stream_is_capturing = SimulatedDriver::capture_status}});
    set_gate_clock(&clock_);
  }

  // A process of a container started with GPUSLICE_COMPUTE_LIMIT=`compute` and
  // GPUSLICE_MEMORY_LIMIT=`memory` (empty: not set), activated as lifecycle does.
  Runtime& start(const std::string& compute, const std::string& memory = {}) {
    Runtime* rt = new_runtime();
    if (!compute.empty())
      rt->settings.compute =
          *config::parse_device_values(compute, config::ValueKind::Percent, config::SizeDialect::Native);
    if (!memory.empty())
      rt->settings.memory =
          *config::parse_device_values(memory, config::ValueKind::Size, config::SizeDialect::Native);
    install(rt);
    g_launch_gated.store(!rt->settings.compute.empty());
    return *rt;
  }

  // A launch as the launch hooks make it: through the gate only while some device is limited.
  static void launch(CUstream stream = nullptr) {
    if (launch_gated()) after_launch(gate_launch(stream), stream);
  }

  static limiter::ComputeLimiter* limiter_of(CUdevice dev) {
    DeviceState* d = device_state(dev);
    return d == nullptr ? nullptr : d->limiter.load();
  }

  SimulatedClock clock_;
};

TEST_F(ComputeLimit, AnUnlimitedDeviceNeverReadsTheClockNorDrains) {
  start("1=50");  // only device 1 is limited: the gate is on for the whole process
  ASSERT_TRUE(launch_gated());
  for (int i = 0; i < 100; ++i) {
    launch(stream_handle(0x100));
    note_sync_begin();
    note_host_sync();
    clock_.advance(5 * kMs);
  }
  EXPECT_EQ(clock_.reads.load(), 0u);
  EXPECT_EQ(SimulatedDriver::drains.load(), 0);
  EXPECT_EQ(SimulatedDriver::capture_queries.load(), 0);
  ASSERT_NE(device_state(0), nullptr);
  EXPECT_LT(device_state(0)->ledger_dev, 0) << "device 0 has no record";
  EXPECT_EQ(limiter_of(0), nullptr);
}

TEST_F(ComputeLimit, ALimitLoweredLiveAppliesAtTheNextLaunch) {
  Runtime& rt = start("50");
  launch();
  limiter::ComputeLimiter* lim = limiter_of(0);
  ASSERT_NE(lim, nullptr);
  EXPECT_EQ(lim->limit_percent(), 50u);
  ASSERT_EQ(SimulatedDriver::drains.load(), 1)
      << "the first launch drains what was queued unlimited, opens a window";

  rt.ledger.load()->set_compute_limit(device_state(0)->ledger_dev, 10);  // `gpuslice set --compute 10`
  clock_.advance(10 * kUs);
  launch();
  EXPECT_EQ(lim->limit_percent(), 10u);
  EXPECT_EQ(SimulatedDriver::drains.load(), 2) << "the window of the old limit ends at once";
  EXPECT_EQ(lim->stats().windows, 1u);
}

// GPUSLICE_MPS_COMPUTE=threads under MPS: the SM share holds the limit, so no GPU-time limiter runs;
// a limit lowered live below the share is held by the time that leaves the process that much of
// the device; a raise leaves the share to hold it (docs/compute-limiter.md).
TEST_F(ComputeLimit, UnderAnSmShareNoLimiterRunsUntilTheLimitIsLoweredBelowIt) {
  Runtime& rt = start("50");
  rt.settings.mps_compute = config::MpsComputeMode::Threads;
  rt.settings.mps_pipe_dir = dir_ / "pipe";  // a control daemon, as far as the client looks
  ASSERT_TRUE(mps_client::prepare(rt.settings, rt.ledger.load()));
  EXPECT_EQ(mps_client::sm_share(), 50u);
  for (int i = 0; i < 20; ++i) {
    launch();
    clock_.advance(1 * kMs);
  }
  EXPECT_EQ(limiter_of(0), nullptr);
  EXPECT_EQ(SimulatedDriver::drains.load(), 0);

  rt.ledger.load()->set_compute_limit(device_state(0)->ledger_dev, 25);  // `gpuslice set --compute 25`
  launch();
  limiter::ComputeLimiter* lim = limiter_of(0);
  ASSERT_NE(lim, nullptr);
  EXPECT_EQ(lim->limit_percent(), 50u) << "half its time on half the SMs";

  rt.ledger.load()->set_compute_limit(device_state(0)->ledger_dev, 80);  // a raise: the share holds
  clock_.advance(10 * kUs);
  launch();
  EXPECT_EQ(lim->limit_percent(), 0u);

  rt.settings.mps_pipe_dir.reset();
  for (const char* name :
       {config::kMpsPinnedLimitVar, config::kMpsClientPriorityVar, config::kMpsThreadPercentVar})
    unsetenv(name);
  ASSERT_TRUE(mps_client::prepare(rt.settings, rt.ledger.load()));  // no MPS: nothing of the above
  EXPECT_EQ(mps_client::sm_share(), 0u);
  EXPECT_FALSE(mps_client::active());
}

TEST_F(ComputeLimit, ADeviceFirstUsedAfterTheLimitsFileChangedGetsItsCap) {
  start("0=50");
  launch();
  ASSERT_NE(limiter_of(0), nullptr);
  write_limits("GPUSLICE_COMPUTE_LIMIT=1=20\n");
  refresh_limits_file();

  SimulatedDriver::current = 1;
  launch();
  limiter::ComputeLimiter* lim = limiter_of(1);
  ASSERT_NE(lim, nullptr) << "the cap alone limits a device nothing else asked to limit";
  EXPECT_EQ(lim->limit_percent(), 20u);
  EXPECT_EQ(limiter_of(0)->limit_percent(), 50u) << "the cap names device 1 only";
}

TEST_F(ComputeLimit, ALimitSetLiveOnAnUnlimitedProcessTurnsTheGateOnAtTheNextTick) {
  Runtime& rt = start("", "1Gi");  // a memory quota only: the device has a record, the gate is off
  DeviceState* d = device_state(0);
  ASSERT_NE(d, nullptr);
  ASSERT_GE(d->ledger_dev, 0);
  compute_limit::tick();
  EXPECT_FALSE(launch_gated());

  rt.ledger.load()->set_compute_limit(d->ledger_dev, 30);
  compute_limit::tick();
  ASSERT_TRUE(launch_gated());
  launch();
  ASSERT_NE(limiter_of(0), nullptr);
  EXPECT_EQ(limiter_of(0)->limit_percent(), 30u);
}

TEST_F(ComputeLimit, AStreamBeingCapturedIntoAGraphIsNeverDrained) {
  Runtime& rt = start("50");
  const CUstream captured = stream_handle(0x200);
  SimulatedDriver::capturing = captured;
  for (int i = 0; i < 200; ++i) {
    launch(captured);
    clock_.advance(2 * kMs);
  }
  rt.ledger.load()->set_compute_limit(device_state(0)->ledger_dev, 10);
  launch(captured);
  EXPECT_EQ(SimulatedDriver::drains.load(), 0);
  EXPECT_GT(SimulatedDriver::capture_queries.load(), 0);

  // The same launches on a stream that is not being captured do drain: the windows close.
  for (int i = 0; i < 200; ++i) {
    launch(stream_handle(0x300));
    clock_.advance(2 * kMs);
  }
  EXPECT_GT(SimulatedDriver::drains.load(), 0);
}

TEST_F(ComputeLimit, BusyTimeTheLimiterMeasuredReachesTheLedgerAtTheNextTick) {
  Runtime& rt = start("50");
  for (int i = 0; i < 200; ++i) {
    launch();
    clock_.advance(2 * kMs);
  }
  const std::uint64_t busy = limiter_of(0)->stats().busy_ns;
  ASSERT_GT(busy, 0u);
  const int record = device_state(0)->ledger_dev;
  auto own_busy = [&] {
    const shm::Snapshot snap = rt.ledger.load()->snapshot();
    std::size_t column = snap.devices.size();
    for (std::size_t i = 0; i < snap.devices.size(); ++i)
      if (snap.devices[i].record == record) column = i;
    for (const shm::ProcessRow& p : snap.processes)
      if (p.pid == getpid() && column < p.busy_ns_by_device.size()) return p.busy_ns_by_device[column];
    return std::uint64_t{0};
  };
  EXPECT_EQ(own_busy(), 0u) << "published by the watcher, not by the launches";
  compute_limit::tick();
  EXPECT_EQ(own_busy(), busy);
  compute_limit::tick();
  EXPECT_EQ(own_busy(), busy) << "published once";
}

TEST_F(ComputeLimit, SettlingAtExitChargesTheOpenWindow) {
  start("50");
  launch();
  clock_.advance(500 * kUs);
  ASSERT_EQ(limiter_of(0)->stats().windows, 0u);
  compute_limit::settle_at_exit();
  EXPECT_EQ(limiter_of(0)->stats().windows, 1u);
  EXPECT_EQ(SimulatedDriver::drains.load(), 2);  // before the first window opened, and the settle's
  EXPECT_GT(limiter_of(0)->stats().busy_ns, 0u);
}

// NVML as the watcher and the limiter read it (core_driver.h): one GPU, its SM clock and utilization.
struct SimulatedNvml {
  static inline bool present = true;
  static inline std::atomic<unsigned> mhz{1500};
  static inline std::atomic<unsigned> util{100};
  static inline std::atomic<int> lookups{0};
  static inline std::atomic<int> clock_reads{0};
  static nvmlDevice_t device(const char*) {
    lookups.fetch_add(1);
    return present ? reinterpret_cast<nvmlDevice_t>(std::uintptr_t{0x5a}) : nullptr;
  }
  static bool clock(nvmlDevice_t, unsigned* out) {
    clock_reads.fetch_add(1);
    *out = mhz.load();
    return true;
  }
  static bool utilization(nvmlDevice_t, unsigned* out) {
    *out = util.load();
    return true;
  }
  static inline std::atomic<bool> capped{true};  // the software power cap holds the clocks
  static bool power_capped(nvmlDevice_t) { return capped.load(); }
  static inline std::atomic<unsigned> max_mhz{0};  // 0: NVML does not tell
  static inline std::atomic<int> max_reads{0};
  static bool max_clock(nvmlDevice_t, unsigned* out) {
    max_reads.fetch_add(1);
    *out = max_mhz.load();
    return max_mhz.load() != 0;
  }
};

class ComputeLimitClock : public ComputeLimit {
 protected:
  void SetUp() override {
    ComputeLimit::SetUp();
    SimulatedNvml::present = true;
    SimulatedNvml::mhz = 1500;
    SimulatedNvml::util = 100;
    SimulatedNvml::lookups = 0;
    SimulatedNvml::clock_reads = 0;
    SimulatedNvml::max_mhz = 0;
    SimulatedNvml::max_reads = 0;
    SimulatedNvml::capped = true;
    set_core_driver({.device_uuid = SimulatedDriver::uuid,
                     .device_total_mem = SimulatedDriver::total,
                     .current_device = SimulatedDriver::current_device,
                     .device_processes = SimulatedDriver::list,
                     .nvml_device = SimulatedNvml::device,
                     .sm_clock_mhz = SimulatedNvml::clock,
                     .gpu_utilization = SimulatedNvml::utilization,
                     .max_sm_clock_mhz = SimulatedNvml::max_clock,
                     .power_capped = SimulatedNvml::power_capped,
                     .gates = {.ctx_synchronize = SimulatedDriver::ctx_synchronize,
                               .stream_synchronize = SimulatedDriver::stream_synchronize,
                               .stream_is_capturing = SimulatedDriver::capture_status}});
  }

  // Device-bound launches (every window charged in full: no timing events here) for `ms`.
  void run_for(int ms) {
    for (int i = 0; i < ms; ++i) {
      launch();
      clock_.advance(kMs);
    }
  }
};

// A second of flat-out samples (100 ms ticks) and two more that confirm its clock give the reference;
// windows while the device runs at a higher clock are then charged (1900 / 1500)^0.455 = 1.114 of
// their GPU time, read once per window.
TEST_F(ComputeLimitClock, TheWatchersFlatOutClockScalesDeviceBoundWindows) {
  start("50");
  run_for(5);
  for (std::uint32_t i = 0;
       i < limiter::ClockReference::kFlatOutSamples + limiter::ClockReference::kConfirmSamples; ++i)
    compute_limit::tick();
  EXPECT_EQ(device_state(0)->flat_clock.mhz(), 1500u);
  SimulatedNvml::mhz = 1900;
  SimulatedNvml::util = 50;  // duty-cycled: the reference stays
  const int reads_before = SimulatedNvml::clock_reads.load();
  run_for(2000);
  compute_limit::tick();
  EXPECT_EQ(device_state(0)->flat_clock.mhz(), 1500u);
  const limiter::Stats st = limiter_of(0)->stats();
  ASSERT_GT(st.clock_windows, 0u);
  const double extra = static_cast<double>(st.clock_extra_ns) / static_cast<double>(st.busy_ns);
  EXPECT_GT(extra, 0.10);
  EXPECT_LT(extra, 0.12);
  // The limiter's reads (all but the tick's): at most one per window, far fewer than the launches.
  EXPECT_LE(SimulatedNvml::clock_reads.load() - reads_before - 1, static_cast<int>(st.windows));
  EXPECT_EQ(SimulatedNvml::lookups.load(), 1) << "the handle is looked up once";
}

// Limited from the start: no flat-out second, so the reference is estimated as the second lowest
// clock of the busy samples (1800 MHz here; NVML's maximum, read once with the handle, tells idle
// readings apart), and windows at 1900 MHz are charged (1900 / 1800)^0.455 = 1.025 of their GPU time.
TEST_F(ComputeLimitClock, LimitedFromTheStartTheLowestBusyClockGivesAnEstimatedReference) {
  SimulatedNvml::util = 50;
  SimulatedNvml::max_mhz = 1980;
  start("50");
  run_for(5);
  for (std::uint32_t i = 0; i < limiter::ClockReference::kWakeSamples; ++i) compute_limit::tick();
  for (const unsigned mhz : {1800u, 1980u, 1800u, 1850u, 1980u, 1900u, 1820u}) {
    SimulatedNvml::mhz = mhz;
    compute_limit::tick();
  }
  SimulatedNvml::mhz = 1900;
  run_for(2000);
  EXPECT_EQ(device_state(0)->flat_clock.mhz(), 0u) << "never flat out";
  EXPECT_EQ(device_state(0)->flat_clock.estimate_mhz(), 1800u);
  EXPECT_EQ(SimulatedNvml::max_reads.load(), 1) << "read once, with the handle";
  const limiter::Stats st = limiter_of(0)->stats();
  ASSERT_GT(st.clock_windows, 0u);
  const double extra = static_cast<double>(st.clock_extra_ns) / static_cast<double>(st.busy_ns);
  EXPECT_GT(extra, 0.020);
  EXPECT_LT(extra, 0.030);
}

// A clock NVML does not say the power cap holds (locked or set by the operator) gets no estimate.
TEST_F(ComputeLimitClock, LimitedFromTheStartAClockThePowerCapDoesNotHoldIsNotEstimated) {
  SimulatedNvml::util = 50;
  SimulatedNvml::max_mhz = 1980;
  SimulatedNvml::capped = false;
  start("50");
  run_for(5);
  for (int i = 0; i < 20; ++i) {
    SimulatedNvml::mhz = 1800 + 20 * (i % 5);
    compute_limit::tick();
  }
  SimulatedNvml::mhz = 1900;
  run_for(2000);
  EXPECT_EQ(limiter_of(0)->stats().clock_windows, 0u);
}

TEST_F(ComputeLimitClock, BeforeFiveBusySamplesNothingIsScaledOrRead) {
  SimulatedNvml::mhz = 1900;
  SimulatedNvml::util = 50;
  start("50");
  run_for(5);
  for (std::uint32_t i = 0; i < limiter::ClockReference::kWakeSamples + 4; ++i) compute_limit::tick();
  const int reads_before = SimulatedNvml::clock_reads.load();
  run_for(2000);
  EXPECT_EQ(limiter_of(0)->stats().clock_windows, 0u);
  EXPECT_EQ(SimulatedNvml::clock_reads.load(), reads_before) << "no window reads a clock it cannot use";
}

TEST_F(ComputeLimitClock, WithoutNvmlNothingIsScaledAndTheLookupStops) {
  SimulatedNvml::present = false;
  start("50");
  for (int i = 0; i < 20; ++i) {
    run_for(50);
    compute_limit::tick();
  }
  EXPECT_EQ(device_state(0)->flat_clock.mhz(), 0u);
  EXPECT_EQ(limiter_of(0)->stats().clock_windows, 0u);
  EXPECT_EQ(SimulatedNvml::clock_reads.load(), 0);
  EXPECT_EQ(SimulatedNvml::lookups.load(), 3);
}

TEST_F(ComputeLimit, AForkedChildMeasuresWithALimiterOfItsOwn) {
  Runtime& rt = start("50");
  launch();
  limiter::ComputeLimiter* parents = limiter_of(0);
  ASSERT_NE(parents, nullptr);
  device_state(0)->busy_published.store(123);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    compute_limit::after_fork();
    DeviceState& d = *device_state(0);
    bool ok = d.limiter.load() == nullptr && d.busy_published.load() == 0 &&
              rt.ledger.load()->register_process().ok();
    launch();
    ok = ok && limiter_of(0) != nullptr && limiter_of(0) != parents && limiter_of(0)->stats().windows == 0;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(limiter_of(0), parents) << "the parent keeps its limiter";
}

}  // namespace
}  // namespace gpuslice::interposer
