// The driver's own reservations on a simulated driver (CoreDriver) over a real container ledger:
// cuCtxSetLimit's heap and stack, the stack's growth at launch, the graph pool and its trim.
#include "interposer/driver_reservations.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>

#include "../test_units.h"
#include "interposer/core_driver.h"
#include "interposer/devices.h"
#include "simulated_driver.h"

namespace gpuslice::interposer {
namespace {

constexpr std::uint64_t kKiB = 1ULL << 10;
using test_units::kGiB;
using test_units::kMiB;
constexpr std::uint64_t kResident = 132 * 2048;  // an H100's resident threads

// Beside the simulated driver's one 80 GiB device: an H100's SMs, functions whose local size is their
// handle's low bits (in KiB), and a graph pool.
struct ReservationDriver {
  static inline std::atomic<int> local_queries{0};
  static inline std::atomic<int> set_limit_calls{0};
  static inline std::uint64_t pool_reserved = 0;
  static inline std::uint64_t pool_used = 0;

  static CUresult attribute(int* value, CUdevice_attribute attr, CUdevice) {
    *value = attr == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT ? 132 : 2048;
    return CUDA_SUCCESS;
  }
  static CUresult local_bytes(CUfunction f, int* bytes) {
    local_queries.fetch_add(1);
    *bytes = static_cast<int>((reinterpret_cast<std::uintptr_t>(f) & 0xff) * kKiB);
    return CUDA_SUCCESS;
  }
  static CUresult graph_attribute(CUdevice, CUgraphMem_attribute attr, std::uint64_t* value) {
    *value = attr == CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT ? pool_reserved : pool_used;
    return CUDA_SUCCESS;
  }
  static CUresult trim(CUdevice) {
    pool_reserved = pool_used;
    return CUDA_SUCCESS;
  }
  static CUresult set_limit(CUlimit, size_t) {
    set_limit_calls.fetch_add(1);
    return CUDA_SUCCESS;
  }
};

CUfunction function_with_local_kib(std::uintptr_t serial, std::uintptr_t kib) {
  return reinterpret_cast<CUfunction>((serial << 12) | kib);
}

class DriverReservations : public SimulatedProcess {
 protected:
  void SetUp() override {
    SimulatedProcess::SetUp();
    SimulatedDriver::devices = 1;
    SimulatedDriver::device_bytes = 80 * kGiB;
    set_core_driver({.device_uuid = SimulatedDriver::uuid,
                     .device_total_mem = SimulatedDriver::total,
                     .device_count = SimulatedDriver::count,
                     .current_device = SimulatedDriver::current_device,
                     .device_attribute = ReservationDriver::attribute,
                     .function_local_bytes = ReservationDriver::local_bytes,
                     .graph_mem_attribute = ReservationDriver::graph_attribute,
                     .graph_mem_trim = ReservationDriver::trim});
    memory_books::set_reclaim(trim_graph_pool);  // as lifecycle does
    ReservationDriver::local_queries = 0;
    ReservationDriver::set_limit_calls = 0;
    ReservationDriver::pool_reserved = 0;
    ReservationDriver::pool_used = 0;
    forget_functions();
    g_smallest_stack.store(kDefaultLimits[CU_LIMIT_STACK_SIZE]);
  }

  // A process of a container with an 8 GiB quota on the device.
  DeviceState& start() {
    Runtime* rt = new_runtime();
    rt->settings.memory =
        *config::parse_device_values("8Gi", config::ValueKind::Size, config::SizeDialect::Native);
    install(rt);
    g_memory_active.store(true);
    return *device_state(0);
  }
  std::uint64_t used(const DeviceState& d) { return ledger()->used(d.ledger_dev); }
};

TEST_F(DriverReservations, AStackLimitReservesThePerThreadSizeForEveryResidentThread) {
  DeviceState& d = start();
  // 47 KiB per thread x 270,336 threads is about 12 GiB: refused before the driver reserves it.
  EXPECT_EQ(set_limit_charged(CU_LIMIT_STACK_SIZE, 47 * kKiB, ReservationDriver::set_limit),
            CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(ReservationDriver::set_limit_calls.load(), 0);
  EXPECT_EQ(used(d), 0u);
  ASSERT_EQ(set_limit_charged(CU_LIMIT_STACK_SIZE, 16 * kKiB, ReservationDriver::set_limit), CUDA_SUCCESS);
  EXPECT_EQ(used(d), (16 * kKiB - 1024) * kResident);
  ASSERT_EQ(set_limit_charged(CU_LIMIT_STACK_SIZE, 1024, ReservationDriver::set_limit), CUDA_SUCCESS);
  EXPECT_EQ(used(d), 0u) << "back to the default: the reservation is part of the context again";
}

TEST_F(DriverReservations, AMallocHeapPastTheQuotaIsRefusedAndASmallerOneCharged) {
  DeviceState& d = start();
  EXPECT_EQ(set_limit_charged(CU_LIMIT_MALLOC_HEAP_SIZE, 12 * kGiB + kGiB / 4, ReservationDriver::set_limit),
            CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(set_limit_charged(CU_LIMIT_MALLOC_HEAP_SIZE, 2 * kGiB, ReservationDriver::set_limit),
            CUDA_SUCCESS);
  EXPECT_EQ(used(d), 2 * kGiB - 8 * kMiB);
  ASSERT_EQ(
      set_limit_charged(CU_LIMIT_PRINTF_FIFO_SIZE, kDefaultLimits[CU_LIMIT_PRINTF_FIFO_SIZE] + 64 * kMiB,
                        ReservationDriver::set_limit),
      CUDA_SUCCESS);
  ASSERT_EQ(
      set_limit_charged(CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT, 2048 + 1024, ReservationDriver::set_limit),
      CUDA_SUCCESS);
  EXPECT_EQ(used(d), 2 * kGiB - 8 * kMiB + 64 * kMiB + 1024 * kPendingLaunchBytes);
}

TEST_F(DriverReservations, ALaunchThatWouldGrowTheStackPastTheQuotaIsRefused) {
  DeviceState& d = start();
  const CUfunction big = function_with_local_kib(1, 64);  // 64 KiB per thread: about 17 GiB of stack
  EXPECT_FALSE(launch_fits(big));
  EXPECT_EQ(used(d), 0u);
  const CUfunction medium = function_with_local_kib(2, 4);
  EXPECT_TRUE(launch_fits(medium));
  EXPECT_EQ(used(d), (4 * kKiB - 1024) * kResident);
  EXPECT_EQ(d.stack_per_thread.load(), 4 * kKiB);
}

TEST_F(DriverReservations, EachFunctionsLocalSizeIsAskedOnce) {
  start();
  const CUfunction small = function_with_local_kib(3, 0);
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(launch_fits(small));
  EXPECT_EQ(ReservationDriver::local_queries.load(), 1);
  forget_functions();  // a module was unloaded: its handles may come back for other functions
  EXPECT_TRUE(launch_fits(small));
  EXPECT_EQ(ReservationDriver::local_queries.load(), 2);
}

TEST_F(DriverReservations, AGraphAllocationNodeThatCouldNeverFitIsRefusedWhenAdded) {
  DeviceState& d = start();
  auto graph = reinterpret_cast<CUgraph>(0x5000);
  EXPECT_FALSE(note_graph_allocation(graph, 0, 12 * kGiB));
  EXPECT_TRUE(note_graph_allocation(graph, 0, 6 * kGiB));
  EXPECT_EQ(used(d), 0u) << "nothing is taken before upload or launch";
}

TEST_F(DriverReservations, TheGraphPoolIsChargedBeforeALaunchBacksTheAllocations) {
  DeviceState& d = start();
  auto graph = reinterpret_cast<CUgraph>(0x6000);
  auto exec = reinterpret_cast<CUgraphExec>(0x7000);
  ASSERT_TRUE(note_graph_allocation(graph, 0, 6 * kGiB));
  note_graph_instantiated(exec, graph);
  ASSERT_TRUE(graph_pool_fits(exec));
  EXPECT_EQ(used(d), 6 * kGiB);
  ReservationDriver::pool_reserved = 6 * kGiB;  // the driver backed it; the graph freed its allocation
  graph_pool_settle(exec);
  EXPECT_EQ(used(d), 6 * kGiB);
  EXPECT_TRUE(graph_pool_fits(exec)) << "the pool already holds what the graph needs";
  EXPECT_EQ(used(d), 6 * kGiB);
  // Another graph needing 9 GiB could never be backed within 8 GiB.
  auto big = reinterpret_cast<CUgraph>(0x8000);
  auto big_exec = reinterpret_cast<CUgraphExec>(0x9000);
  ASSERT_TRUE(note_graph_allocation(big, 0, 7 * kGiB));
  note_graph_instantiated(big_exec, big);
  ReservationDriver::pool_used = 2 * kGiB;  // while the first graph's allocation is still live
  EXPECT_FALSE(graph_pool_fits(big_exec));
}

TEST_F(DriverReservations, AnAllocationRefusedWhileThePoolHoldsUnusedMemoryTrimsItFirst) {
  DeviceState& d = start();
  auto graph = reinterpret_cast<CUgraph>(0xa000);
  auto exec = reinterpret_cast<CUgraphExec>(0xb000);
  ASSERT_TRUE(note_graph_allocation(graph, 0, 6 * kGiB));
  note_graph_instantiated(exec, graph);
  ASSERT_TRUE(graph_pool_fits(exec));
  ReservationDriver::pool_reserved = 6 * kGiB;
  graph_pool_settle(exec);
  const Reservation r = reserve(&d, 4 * kGiB);
  EXPECT_FALSE(r.refused) << "the pool gave its unused 6 GiB back";
  EXPECT_EQ(ReservationDriver::pool_reserved, 0u);
  EXPECT_EQ(used(d), 4 * kGiB);
}

TEST_F(DriverReservations, WithoutAQuotaOnTheDeviceNothingIsCharged) {
  start();
  Runtime* rt = runtime();
  DeviceState& d = rt->devices[0];
  const int record = d.ledger_dev;
  d.ledger_dev.store(-1);
  EXPECT_TRUE(launch_fits(function_with_local_kib(4, 64)));
  EXPECT_EQ(set_limit_charged(CU_LIMIT_MALLOC_HEAP_SIZE, 40 * kGiB, ReservationDriver::set_limit),
            CUDA_SUCCESS);
  d.ledger_dev.store(record);
  EXPECT_EQ(ledger()->used(record), 0u);
}

}  // namespace
}  // namespace gpuslice::interposer
