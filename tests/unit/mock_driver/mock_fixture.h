// Every test gets its own state directory and a mock reset to "before cuInit", so tests stay
// independent whether ctest runs them one per process or the binary runs them all in one.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <utility>

#include "abi/cuda_abi.h"
#include "abi/nvml_abi.h"
#include "mock_control.h"
#include "temp_dir.h"

namespace gpuslice::mock::testing {

inline constexpr std::uint64_t kMiB = 1ULL << 20;
inline constexpr std::uint64_t kGiB = 1ULL << 30;

inline constexpr const char* kMockVariables[] = {
    "GPUSLICE_MOCK_DEVICES",        "GPUSLICE_MOCK_MEMORY",
    "GPUSLICE_MOCK_UUIDS",          "GPUSLICE_MOCK_CONTEXT_BYTES",
    "GPUSLICE_MOCK_KERNEL_NS",      "GPUSLICE_MOCK_FAKE_CLOCK",
    "GPUSLICE_MOCK_DRIVER_VERSION", "GPUSLICE_MOCK_QUEUE_DEPTH",
    "GPUSLICE_MOCK_STATE_DIR",      "GPUSLICE_MOCK_NVML_DRIVER_VERSION",
    "GPUSLICE_MOCK_CAPTURING"};

using Env = std::initializer_list<std::pair<const char*, const char*>>;

class MockDriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(state_dir_.empty()) << "mkdtemp failed";
    for (const char* name : kMockVariables) unsetenv(name);
    setenv("GPUSLICE_MOCK_STATE_DIR", state_dir_.c_str(), 1);
    gpuslice_mock_reset();
  }

  void TearDown() override {
    gpuslice_mock_reset();
    while (nvmlShutdown() == NVML_SUCCESS) {
    }
    for (const char* name : kMockVariables) unsetenv(name);
  }

  static void set_env(Env env) {
    for (const auto& [name, value] : env) setenv(name, value, 1);
  }

  // cuInit under the given GPUSLICE_MOCK_* values, then the primary context of `device` made current.
  CUcontext start(Env env = {}, int device = 0) {
    set_env(env);
    EXPECT_EQ(cuInit(0), CUDA_SUCCESS);
    CUcontext context = nullptr;
    EXPECT_EQ(cuDevicePrimaryCtxRetain(&context, device), CUDA_SUCCESS);
    EXPECT_EQ(cuCtxSetCurrent(context), CUDA_SUCCESS);
    return context;
  }

  static std::uint64_t free_bytes() {
    size_t free = 0;
    size_t total = 0;
    EXPECT_EQ(cuMemGetInfo_v2(&free, &total), CUDA_SUCCESS);
    return free;
  }

  // Device memory in use as NVML reports it (every process, contexts included).
  static std::uint64_t nvml_used(unsigned index) {
    EXPECT_EQ(nvmlInit_v2(), NVML_SUCCESS);
    nvmlDevice_t device = nullptr;
    EXPECT_EQ(nvmlDeviceGetHandleByIndex_v2(index, &device), NVML_SUCCESS);
    nvmlMemory_t memory{};
    EXPECT_EQ(nvmlDeviceGetMemoryInfo(device, &memory), NVML_SUCCESS);
    EXPECT_EQ(nvmlShutdown(), NVML_SUCCESS);
    return memory.used;
  }

  gpuslice::test::TempDir temp_{"gpuslice-mocktest"};  // removed with all it holds at the end
  const std::string state_dir_ = temp_.path();
};

}  // namespace gpuslice::mock::testing
