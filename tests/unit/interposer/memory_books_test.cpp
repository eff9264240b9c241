// The memory books and the device table on a simulated driver (CoreDriver) over a real container
// ledger: reservation races, footprint reconciliation, the limits rule for late devices, fork.
#include "interposer/memory_books.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "../test_units.h"
#include "interposer/core_driver.h"
#include "interposer/devices.h"
#include "simulated_driver.h"

namespace gpuslice::interposer {
namespace {

using test_units::kGiB;
using test_units::kMiB;

class MemoryBooks : public SimulatedProcess {
 protected:
  void SetUp() override {
    SimulatedProcess::SetUp();
    set_core_driver({.device_uuid = SimulatedDriver::uuid,
                     .device_total_mem = SimulatedDriver::total,
                     .device_count = SimulatedDriver::count,
                     .current_device = SimulatedDriver::current_device,
                     .device_processes = SimulatedDriver::list});
    clear_allocation_tables_after_fork();
  }

  // A process of a container started with GPUSLICE_MEMORY_LIMIT=`memory` and the limits file
  // holding `file` (empty: no file).
  Runtime& start(const std::string& memory, const std::string& file = {}) {
    Runtime* rt = new_runtime();
    rt->settings.memory =
        *config::parse_device_values(memory, config::ValueKind::Size, config::SizeDialect::Native);
    if (!file.empty()) write_limits(file);
    config::apply_limits_file(rt->settings, rt->settings.limits_file);
    EXPECT_TRUE(rt->settings.ok()) << rt->settings.errors.front();
    install(rt);
    g_memory_active.store(true);
    return *rt;
  }

  // Allocates like a hook: the simulated driver always succeeds, handing out fresh addresses.
  CUresult allocate_bytes(std::uint64_t bytes, CUdeviceptr* out) {
    static std::atomic<CUdeviceptr> next{0x10000};
    CUdeviceptr dptr = 0;
    CUresult r = allocate_linear(current_device_state(), bytes, &dptr, [&] {
      dptr = next.fetch_add(0x1000);
      return CUDA_SUCCESS;
    });
    *out = dptr;
    return r;
  }
};

TEST_F(MemoryBooks, ThreadsRacingForTheQuotaNeverTogetherExceedIt) {
  Runtime& rt = start("1Gi");
  constexpr int kThreads = 8;
  std::atomic<std::uint64_t> granted{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t) {
    pool.emplace_back([&] {
      for (int i = 0; i < 64; ++i) {
        CUdeviceptr p = 0;
        if (allocate_bytes(8 * kMiB, &p) == CUDA_SUCCESS) granted.fetch_add(8 * kMiB);
      }
    });
  }
  for (auto& t : pool) t.join();
  DeviceState* d = device_state(0);
  ASSERT_NE(d, nullptr);
  EXPECT_LE(granted.load(), kGiB) << "never more than the quota";
  EXPECT_EQ(rt.ledger.load()->used(d->ledger_dev), granted.load()) << "the books match what was handed out";
  // A racing reservation may back off needlessly, but nothing is lost: the rest is still there.
  CUdeviceptr p = 0;
  while (allocate_bytes(8 * kMiB, &p) == CUDA_SUCCESS) granted.fetch_add(8 * kMiB);
  EXPECT_EQ(granted.load(), kGiB);
  EXPECT_EQ(rt.ledger.load()->used(d->ledger_dev), kGiB);
}

TEST_F(MemoryBooks, AFailedDriverAllocationGivesTheReservationBack) {
  Runtime& rt = start("1Gi");
  CUdeviceptr dptr = 0;
  CUresult r =
      allocate_linear(current_device_state(), 512 * kMiB, &dptr, [] { return CUDA_ERROR_OUT_OF_MEMORY; });
  EXPECT_EQ(r, CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(rt.ledger.load()->used(device_state(0)->ledger_dev), 0u);
}

TEST_F(MemoryBooks, AFreeReturnsTheBytesAndADoubleFreeReturnsNothing) {
  Runtime& rt = start("1Gi");
  CUdeviceptr p = 0;
  ASSERT_EQ(allocate_bytes(256 * kMiB, &p), CUDA_SUCCESS);
  const int dev = device_state(0)->ledger_dev;
  EXPECT_EQ(rt.ledger.load()->used(dev), 256 * kMiB);
  EXPECT_EQ(release(AllocKind::Linear, p, [] { return CUDA_SUCCESS; }), CUDA_SUCCESS);
  EXPECT_EQ(rt.ledger.load()->used(dev), 0u);
  EXPECT_EQ(release(AllocKind::Linear, p, [] { return CUDA_ERROR_INVALID_VALUE; }), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(rt.ledger.load()->used(dev), 0u);
}

TEST_F(MemoryBooks, TheContextFootprintIsChargedAndGivenBackAsTheDriverReportsIt) {
  Runtime& rt = start("1Gi");
  CUdeviceptr p = 0;
  ASSERT_EQ(allocate_bytes(100 * kMiB, &p), CUDA_SUCCESS);
  DeviceState& d = *device_state(0);
  SimulatedDriver::report_own_usage(100 * kMiB + 300 * kMiB);  // the driver holds 300 MiB more than we track
  reconcile_context_footprint(d);
  EXPECT_EQ(rt.ledger.load()->used(d.ledger_dev), 400 * kMiB);
  EXPECT_EQ(d.context_charge.load(), 300 * kMiB);
  SimulatedDriver::report_own_usage(100 * kMiB + 64 * kMiB);  // module images unloaded
  reconcile_context_footprint(d);
  EXPECT_EQ(rt.ledger.load()->used(d.ledger_dev), 164 * kMiB);
  SimulatedDriver::report_own_usage(100 * kMiB + 65 * kMiB);  // within the slack: not worth a change
  reconcile_context_footprint(d);
  EXPECT_EQ(d.context_charge.load(), 64 * kMiB);
}

TEST_F(MemoryBooks, WhileAllocationsMoveTheFootprintOnlyGrows) {
  Runtime& rt = start("1Gi");
  CUdeviceptr p = 0;
  ASSERT_EQ(allocate_bytes(100 * kMiB, &p), CUDA_SUCCESS);
  DeviceState& d = *device_state(0);
  SimulatedDriver::report_own_usage(400 * kMiB);
  reconcile_context_footprint(d);
  ASSERT_EQ(d.context_charge.load(), 300 * kMiB);
  {
    // A free in flight: the driver may have freed already, the books not yet. Never lowered then.
    AllocationInFlight flight;
    SimulatedDriver::report_own_usage(300 * kMiB);
    reconcile_context_footprint(d);
    EXPECT_EQ(d.context_charge.load(), 300 * kMiB);
    // But what the driver holds beyond the books (which never hold less than it for what the hooks
    // saw) is charged at once, however busy the process: a churning process cannot hide growth.
    SimulatedDriver::report_own_usage(600 * kMiB);
    reconcile_context_footprint(d);
    EXPECT_EQ(d.context_charge.load(), 500 * kMiB);
  }
  EXPECT_EQ(rt.ledger.load()->used(d.ledger_dev), 600 * kMiB);
}

TEST_F(MemoryBooks, AFootprintPastTheQuotaIsChargedAndRefusesAllocationsUntilItIsBelow) {
  Runtime& rt = start("1Gi");
  CUdeviceptr p = 0;
  ASSERT_EQ(allocate_bytes(900 * kMiB, &p), CUDA_SUCCESS);
  DeviceState& d = *device_state(0);
  SimulatedDriver::report_own_usage(900 * kMiB + 200 * kMiB);
  reconcile_context_footprint(d);
  EXPECT_EQ(rt.ledger.load()->used(d.ledger_dev), 1100 * kMiB) << "the books hold the driver's figure";
  EXPECT_EQ(d.context_charge.load(), 200 * kMiB);
  CUdeviceptr q = 0;
  EXPECT_EQ(allocate_bytes(kMiB, &q), CUDA_ERROR_OUT_OF_MEMORY);
  SimulatedDriver::report_own_usage(900 * kMiB + 50 * kMiB);  // the driver gave memory back
  reconcile_context_footprint(d);
  EXPECT_EQ(rt.ledger.load()->used(d.ledger_dev), 950 * kMiB);
  EXPECT_EQ(allocate_bytes(kMiB, &q), CUDA_SUCCESS);
}

TEST_F(MemoryBooks, AFileCapNeverRaisesTheRequestedQuota) {
  start("1Gi", "GPUSLICE_MEMORY_LIMIT=4Gi\n");
  DeviceState& d = *device_state(0);
  EXPECT_EQ(effective_quota(d), kGiB);
  write_limits("GPUSLICE_MEMORY_LIMIT=8Gi\n");
  refresh_limits_file();
  EXPECT_EQ(effective_quota(d), kGiB);
  write_limits("GPUSLICE_MEMORY_LIMIT=512Mi\n");
  refresh_limits_file();
  EXPECT_EQ(effective_quota(d), 512 * kMiB);
}

TEST_F(MemoryBooks, ADeviceAttachedAfterTheFileChangedGetsTheNewCap) {
  start("2Gi");
  SimulatedDriver::current = 0;
  ASSERT_NE(current_device_state(), nullptr);
  write_limits("GPUSLICE_MEMORY_LIMIT=1Gi\n");
  refresh_limits_file();
  EXPECT_EQ(effective_quota(*device_state(0)), kGiB);
  DeviceState* late = device_state(1);  // first use long after start
  ASSERT_NE(late, nullptr);
  ASSERT_GE(late->ledger_dev, 0);
  EXPECT_EQ(effective_quota(*late), kGiB);
}

TEST_F(MemoryBooks, ADeviceAttachedWithoutALimitTakesACapWrittenLater) {
  start("0=2Gi");  // device 1 has neither a request nor a cap when it attaches
  DeviceState* unlimited = device_state(1);
  ASSERT_NE(unlimited, nullptr);
  EXPECT_LT(unlimited->ledger_dev, 0);
  write_limits("GPUSLICE_MEMORY_LIMIT=1Gi\n");
  refresh_limits_file();
  ASSERT_GE(unlimited->ledger_dev, 0) << "the cap gives the device a record";
  EXPECT_EQ(effective_quota(*unlimited), kGiB);
  EXPECT_EQ(effective_quota(*device_state(0)), kGiB);
  SimulatedDriver::current = 1;
  CUdeviceptr p = 0;
  EXPECT_EQ(allocate_bytes(kGiB + kMiB, &p), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(allocate_bytes(512 * kMiB, &p), CUDA_SUCCESS);
}

TEST_F(MemoryBooks, ASameSizeRewriteOfTheLimitsFileIsSeen) {
  start("2Gi", "GPUSLICE_MEMORY_LIMIT=768Mi\n");
  DeviceState& d = *device_state(0);
  refresh_limits_file();  // the watcher's first look
  ASSERT_EQ(effective_quota(d), 768 * kMiB);
  const std::string path = dir_ / "limits";
  struct stat before {};
  ASSERT_EQ(stat(path.c_str(), &before), 0);
  write_limits("GPUSLICE_MEMORY_LIMIT=512Mi\n");  // the same number of bytes
  // A filesystem with coarse timestamps gives the new file the old one's modification time.
  const timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  refresh_limits_file();
  EXPECT_EQ(effective_quota(d), 512 * kMiB);
}

TEST_F(MemoryBooks, AMalformedRewriteKeepsThePreviousCaps) {
  start("2Gi", "GPUSLICE_MEMORY_LIMIT=1Gi\n");
  DeviceState& d = *device_state(0);
  write_limits("GPUSLICE_MEMORY_LIMIT=lots\n");
  refresh_limits_file();
  EXPECT_EQ(effective_quota(d), kGiB);
}

TEST_F(MemoryBooks, AForkedChildOwnsNoneOfItsParentsAllocationsOrFootprint) {
  Runtime& rt = start("1Gi");
  CUdeviceptr p = 0;
  ASSERT_EQ(allocate_bytes(128 * kMiB, &p), CUDA_SUCCESS);
  DeviceState& d = *device_state(0);
  d.has_context.store(true);
  d.context_charge.store(64 * kMiB);
  const std::uint64_t tracked_before = tracked_allocation_count();
  ASSERT_GT(tracked_before, 0u);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    memory_books::after_fork();
    bool ok = tracked_allocation_count() == 0 && !d.has_context.load() && d.context_charge.load() == 0 &&
              rt.ledger.load()->register_process().ok() && rt.ledger.load()->used_by_self(d.ledger_dev) == 0;
    // Freeing the parent's pointer in the child gives nothing back to the books.
    release(AllocKind::Linear, p, [] { return CUDA_SUCCESS; });
    ok = ok && rt.ledger.load()->used(d.ledger_dev) == 128 * kMiB;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(tracked_allocation_count(), tracked_before) << "the parent's books are untouched";
}

}  // namespace
}  // namespace gpuslice::interposer
