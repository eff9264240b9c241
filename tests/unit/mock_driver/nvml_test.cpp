// The simulated libnvidia-ml, and the cross-process view it shares with the mock libcuda.
#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "mock_fixture.h"

namespace gpuslice::mock::testing {
namespace {

using NvmlTest = MockDriverTest;

nvmlDevice_t device_at(unsigned index) {
  nvmlDevice_t device = nullptr;
  EXPECT_EQ(nvmlDeviceGetHandleByIndex_v2(index, &device), NVML_SUCCESS);
  return device;
}

TEST_F(NvmlTest, InitIsCountedAndRequired) {
  unsigned count = 0;
  EXPECT_EQ(nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
  EXPECT_EQ(nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
  ASSERT_EQ(nvmlInit(), NVML_SUCCESS);
  ASSERT_EQ(nvmlInitWithFlags(0), NVML_SUCCESS);
  ASSERT_EQ(nvmlShutdown(), NVML_SUCCESS);
  EXPECT_EQ(nvmlDeviceGetCount(&count), NVML_SUCCESS);  // one reference is left
  EXPECT_EQ(count, 2u);
  ASSERT_EQ(nvmlShutdown(), NVML_SUCCESS);
  EXPECT_EQ(nvmlDeviceGetCount(&count), NVML_ERROR_UNINITIALIZED);
  EXPECT_STREQ(nvmlErrorString(NVML_ERROR_INSUFFICIENT_SIZE), "Insufficient Size");
}

TEST_F(NvmlTest, DescribesTheSimulatedDevices) {
  set_env({{"GPUSLICE_MOCK_DEVICES", "3"}});
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  char text[96] = {};
  ASSERT_EQ(nvmlSystemGetDriverVersion(text, sizeof(text)), NVML_SUCCESS);
  EXPECT_STREQ(text, "580.00.00-mock");
  EXPECT_EQ(nvmlSystemGetDriverVersion(text, 5), NVML_ERROR_INSUFFICIENT_SIZE);

  nvmlDevice_t second = device_at(2);
  ASSERT_EQ(nvmlDeviceGetUUID(second, text, sizeof(text)), NVML_SUCCESS);
  EXPECT_STREQ(text, "GPU-6d6f636b-0000-4000-8000-000000000002");
  nvmlDevice_t found = nullptr;
  ASSERT_EQ(nvmlDeviceGetHandleByUUID("gpu-6D6F636B-0000-4000-8000-000000000002", &found), NVML_SUCCESS);
  EXPECT_EQ(found, second);
  EXPECT_EQ(nvmlDeviceGetHandleByUUID("GPU-6d6f636b-0000-4000-8000-000000000009", &found), NVML_ERROR_NOT_FOUND);
  unsigned index = 0;
  ASSERT_EQ(nvmlDeviceGetIndex(second, &index), NVML_SUCCESS);
  EXPECT_EQ(index, 2u);
  ASSERT_EQ(nvmlDeviceGetName(second, text, sizeof(text)), NVML_SUCCESS);
  EXPECT_STREQ(text, "gpuslice mock GPU");
  EXPECT_EQ(nvmlDeviceGetUUID(second, text, 10), NVML_ERROR_INSUFFICIENT_SIZE);
  nvmlDevice_t missing = nullptr;
  EXPECT_EQ(nvmlDeviceGetHandleByIndex(3, &missing), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvmlDeviceGetIndex(reinterpret_cast<nvmlDevice_t>(&index), &index), NVML_ERROR_INVALID_ARGUMENT);
}

TEST_F(NvmlTest, MemoryInfoV2ChecksItsVersion) {
  set_env({{"GPUSLICE_MOCK_MEMORY", "4294967296"}});
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  nvmlMemory_v2_t memory{};
  memory.version = 1;
  EXPECT_EQ(nvmlDeviceGetMemoryInfo_v2(device_at(0), &memory), NVML_ERROR_INVALID_ARGUMENT);
  memory.version = GPUSLICE_NVML_MEMORY_V2;
  memory.reserved = 77;
  ASSERT_EQ(nvmlDeviceGetMemoryInfo_v2(device_at(0), &memory), NVML_SUCCESS);
  EXPECT_EQ(memory.total, 4 * kGiB);
  EXPECT_EQ(memory.free, 4 * kGiB);
  EXPECT_EQ(memory.used, 0u);
  EXPECT_EQ(memory.reserved, 0u);
}

TEST_F(NvmlTest, ReportsThisProcessWithoutInitialisingCudaItself) {
  start({{"GPUSLICE_MOCK_MEMORY", "4294967296"}, {"GPUSLICE_MOCK_CONTEXT_BYTES", "1048576"}}, 1);
  CUdeviceptr pointer = 0;
  ASSERT_EQ(cuMemAlloc_v2(&pointer, 10 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  unsigned count = 0;
  ASSERT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(device_at(0), &count, nullptr), NVML_SUCCESS);
  EXPECT_EQ(count, 0u);
  EXPECT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(device_at(1), &count, nullptr), NVML_ERROR_INSUFFICIENT_SIZE);
  ASSERT_EQ(count, 1u);
  nvmlProcessInfo_t info{};
  ASSERT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(device_at(1), &count, &info), NVML_SUCCESS);
  EXPECT_EQ(info.pid, static_cast<unsigned>(getpid()));
  EXPECT_EQ(info.usedGpuMemory, 11 * kMiB);
  EXPECT_EQ(info.gpuInstanceId, 0xFFFFFFFFu);
  nvmlMemory_t memory{};
  ASSERT_EQ(nvmlDeviceGetMemoryInfo(device_at(1), &memory), NVML_SUCCESS);
  EXPECT_EQ(memory.used, 11 * kMiB);
  EXPECT_EQ(memory.free, 4 * kGiB - 11 * kMiB);
}

// A child process that allocates on device 1, reports through a pipe, then waits to be killed.
pid_t spawn_allocating_child(std::uint64_t bytes, int* ready_fd) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return -1;
  pid_t child = fork();
  if (child == 0) {
    close(pipe_fds[0]);
    CUcontext context = nullptr;
    CUdeviceptr pointer = 0;
    char outcome = 'E';
    if (cuInit(0) == CUDA_SUCCESS && cuDevicePrimaryCtxRetain(&context, 1) == CUDA_SUCCESS &&
        cuCtxSetCurrent(context) == CUDA_SUCCESS && cuMemAlloc_v2(&pointer, bytes) == CUDA_SUCCESS) {
      outcome = 'R';
    }
    if (write(pipe_fds[1], &outcome, 1) != 1) _exit(2);
    for (;;) pause();  // killed by the parent, without any cleanup of its own
  }
  close(pipe_fds[1]);
  *ready_fd = pipe_fds[0];
  return child;
}

void kill_and_reap(pid_t child) {
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
}

TEST_F(NvmlTest, AForkedChildsUsageIsVisibleUntilItIsKilled) {
  start({{"GPUSLICE_MOCK_MEMORY", "4294967296"}, {"GPUSLICE_MOCK_CONTEXT_BYTES", "8388608"}}, 1);
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  int ready_fd = -1;
  pid_t child = spawn_allocating_child(64 * kMiB, &ready_fd);
  ASSERT_GT(child, 0);
  char outcome = 0;
  ASSERT_EQ(read(ready_fd, &outcome, 1), 1);
  close(ready_fd);
  EXPECT_EQ(outcome, 'R');

  nvmlProcessInfo_t infos[4] = {};
  unsigned count = 4;
  ASSERT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(device_at(1), &count, infos), NVML_SUCCESS);
  ASSERT_EQ(count, 2u);
  const nvmlProcessInfo_t* of_child = infos[0].pid == static_cast<unsigned>(child) ? &infos[0] : &infos[1];
  const nvmlProcessInfo_t* of_parent = of_child == &infos[0] ? &infos[1] : &infos[0];
  EXPECT_EQ(of_child->pid, static_cast<unsigned>(child));
  EXPECT_EQ(of_child->usedGpuMemory, 72 * kMiB);  // allocation + its context
  EXPECT_EQ(of_parent->pid, static_cast<unsigned>(getpid()));
  EXPECT_EQ(of_parent->usedGpuMemory, 8 * kMiB);
  EXPECT_EQ(free_bytes(), 4 * kGiB - 80 * kMiB);  // cuMemGetInfo counts other processes too

  kill_and_reap(child);
  count = 4;
  ASSERT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(device_at(1), &count, infos), NVML_SUCCESS);
  ASSERT_EQ(count, 1u);
  EXPECT_EQ(infos[0].pid, static_cast<unsigned>(getpid()));
  nvmlMemory_t memory{};
  ASSERT_EQ(nvmlDeviceGetMemoryInfo(device_at(1), &memory), NVML_SUCCESS);
  EXPECT_EQ(memory.used, 8 * kMiB);
}

TEST_F(NvmlTest, AKilledProcessesMemoryCanBeAllocatedAgain) {
  start({{"GPUSLICE_MOCK_MEMORY", "1073741824"}, {"GPUSLICE_MOCK_CONTEXT_BYTES", "0"}}, 1);
  int ready_fd = -1;
  pid_t child = spawn_allocating_child(900 * kMiB, &ready_fd);
  ASSERT_GT(child, 0);
  char outcome = 0;
  ASSERT_EQ(read(ready_fd, &outcome, 1), 1);
  close(ready_fd);
  EXPECT_EQ(outcome, 'R');
  CUdeviceptr pointer = 0;
  EXPECT_EQ(cuMemAlloc_v2(&pointer, 512 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  kill_and_reap(child);
  EXPECT_EQ(cuMemAlloc_v2(&pointer, 512 * kMiB), CUDA_SUCCESS);  // the dead child's share came back
  EXPECT_EQ(free_bytes(), 512 * kMiB);
}

TEST_F(NvmlTest, UnloadingTheDriverGivesItsUsageBack) {
  set_env({{"GPUSLICE_MOCK_CONTEXT_BYTES", "1048576"}});
  void* direct = dlopen(GPUSLICE_TEST_MOCK_DIR "/libgpuslice-mockcuda-direct.so", RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(direct, nullptr) << dlerror();
  auto init = reinterpret_cast<decltype(&cuInit)>(dlsym(direct, "cuInit"));
  auto retain = reinterpret_cast<decltype(&cuDevicePrimaryCtxRetain)>(dlsym(direct, "cuDevicePrimaryCtxRetain"));
  auto set_current = reinterpret_cast<decltype(&cuCtxSetCurrent)>(dlsym(direct, "cuCtxSetCurrent"));
  auto alloc = reinterpret_cast<decltype(&cuMemAlloc_v2)>(dlsym(direct, "cuMemAlloc_v2"));
  ASSERT_TRUE(init && retain && set_current && alloc);
  CUcontext context = nullptr;
  CUdeviceptr pointer = 0;
  ASSERT_EQ(init(0), CUDA_SUCCESS);
  ASSERT_EQ(retain(&context, 0), CUDA_SUCCESS);
  ASSERT_EQ(set_current(context), CUDA_SUCCESS);
  ASSERT_EQ(alloc(&pointer, 32 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(nvml_used(0), 33 * kMiB);
  ASSERT_EQ(dlclose(direct), 0);  // runs the same release as process exit
  EXPECT_EQ(nvml_used(0), 0u);
}

}  // namespace
}  // namespace gpuslice::mock::testing
