// The simulated driver and process the interposer's core is tested on (memory books, driver
// reservations, compute limit, priority sharing): the core's own driver calls (core_driver.h)
// answered by a simulation, over a real container ledger in a directory of the test's own.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "common/clock.h"
#include "interposer/core_driver.h"
#include "interposer/gate_driver.h"
#include "interposer/launch_flag.h"
#include "interposer/memory_books.h"
#include "interposer/runtime.h"
#include "limiter/compute_limiter.h"
#include "limiter/priority_gate.h"
#include "temp_dir.h"

namespace gpuslice::interposer {

// A clock that moves only when told to, or when a limiter sleeps; counts how often it is read.
class SimulatedClock final : public Clock {
 public:
  explicit SimulatedClock(std::uint64_t start_ns = 1'000'000'000) : now(start_ns) {}
  std::uint64_t now_ns() override {
    reads.fetch_add(1);
    return now.load();
  }
  void sleep_ns(std::uint64_t ns) override { now.fetch_add(ns); }
  void advance(std::uint64_t ns) { now.fetch_add(ns); }

  std::atomic<std::uint64_t> now;
  std::atomic<std::uint64_t> reads{0};
};

// `devices` devices of `device_bytes` each (device d's UUID bytes d * 16 + i), a current device per
// thread, NVML's process list, counted drains, and one stream that is being captured into a graph.
// A test hands set_core_driver() the calls it simulates, and may add its own beside them.
struct SimulatedDriver {
  static inline int devices = 2;
  static inline std::uint64_t device_bytes = 16ULL << 30;
  static inline thread_local CUdevice current = 0;
  static inline std::atomic<int> drains{0};
  static inline std::atomic<int> capture_queries{0};
  static inline CUstream capturing = nullptr;
  static inline std::mutex mutex;
  static inline std::vector<nvmlProcessInfo_t> processes;

  static CUresult uuid(CUuuid* out, CUdevice dev) {
    if (dev < 0 || dev >= devices) return CUDA_ERROR_INVALID_DEVICE;
    for (int i = 0; i < 16; ++i) out->bytes[i] = static_cast<char>(dev * 16 + i);
    return CUDA_SUCCESS;
  }
  static CUresult total(std::size_t* bytes, CUdevice dev) {
    if (dev < 0 || dev >= devices) return CUDA_ERROR_INVALID_DEVICE;
    *bytes = device_bytes;
    return CUDA_SUCCESS;
  }
  static CUresult current_device(CUdevice* dev) {
    *dev = current;
    return CUDA_SUCCESS;
  }
  static CUresult count(int* n) {
    *n = devices;
    return CUDA_SUCCESS;
  }
  static bool list(const char*, nvmlProcessInfo_t* out, unsigned* count) {
    std::lock_guard<std::mutex> lock(mutex);
    unsigned n = 0;
    for (const auto& p : processes)
      if (n < *count) out[n++] = p;
    *count = n;
    return true;
  }
  // NVML lists this process alone, holding `bytes`.
  static void report_own_usage(std::uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex);
    processes.clear();
    nvmlProcessInfo_t own{};
    own.pid = static_cast<unsigned>(getpid());
    own.usedGpuMemory = bytes;
    processes.push_back(own);
  }
  static CUresult ctx_synchronize() {
    drains.fetch_add(1);
    return CUDA_SUCCESS;
  }
  static CUresult stream_synchronize(CUstream) { return ctx_synchronize(); }
  static CUresult capture_status(CUstream stream, int* status) {
    capture_queries.fetch_add(1);
    *status = stream != nullptr && stream == capturing ? 1 : 0;
    return CUDA_SUCCESS;
  }

  // Two 16 GiB devices, device 0 current, no process listed, nothing counted or captured.
  static void reset() {
    devices = 2;
    device_bytes = 16ULL << 30;
    current = 0;
    drains.store(0);
    capture_queries.store(0);
    capturing = nullptr;
    std::lock_guard<std::mutex> lock(mutex);
    processes.clear();
  }
};

// A process of a container on the simulated driver: its state, limits file and node directory in
// the test's own directory; what the library keeps for the process's life goes with the test.
class SimulatedProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    SimulatedDriver::reset();
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
    g_memory_active.store(false);
    g_launch_gated.store(false);
    set_gate_clock(nullptr);
    memory_books::set_reclaim(nullptr);
  }

  // A runtime whose files are the test's (the settings are the test's to fill before install()).
  Runtime* new_runtime() {
    auto* rt = new Runtime();  // lives as long as the process, as in the library
    rt->settings.shared_file = dir_ / "state";
    rt->settings.limits_file = dir_ / "limits";
    rt->settings.node_dir = dir_ / "node";
    return rt;
  }
  // Opens the container ledger, registers this process and installs `rt` as the library's runtime.
  Runtime& install(Runtime* rt) {
    auto opened = shm::Ledger::open(rt->settings.shared_file, shm::Ledger::Mode::Process);
    EXPECT_TRUE(opened.ok()) << opened.error();
    rt->ledger.store(std::move(opened).value().release());
    EXPECT_TRUE(rt->ledger.load()->register_process().ok());
    install_runtime(rt);
    return *rt;
  }

  // The limits file rewritten as the node daemon does it (a new file renamed over the old).
  void write_limits(const std::string& text) {
    std::ofstream(dir_ / "limits.tmp") << text;
    std::filesystem::rename(dir_ / "limits.tmp", dir_ / "limits");
  }

  test::TempDir dir_;
};

}  // namespace gpuslice::interposer
