// The simulated libnvidia-ml, and the cross-process view it shares with the mock libcuda.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "abi/nvml_export_table.h"
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
  EXPECT_EQ(nvmlDeviceGetHandleByUUID("GPU-6d6f636b-0000-4000-8000-000000000009", &found),
            NVML_ERROR_NOT_FOUND);
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

TEST_F(NvmlTest, AProcessWithAContextIsListedEvenWithoutMemory) {
  start({{"GPUSLICE_MOCK_CONTEXT_BYTES", "0"}});
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  nvmlProcessInfo_t info{};
  unsigned count = 1;
  ASSERT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(device_at(0), &count, &info), NVML_SUCCESS);
  ASSERT_EQ(count, 1u);
  EXPECT_EQ(info.pid, static_cast<unsigned>(getpid()));
  EXPECT_EQ(info.usedGpuMemory, 0u);
  ASSERT_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
  ASSERT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(device_at(0), &count, &info), NVML_SUCCESS);
  EXPECT_EQ(count, 0u);
}

TEST_F(NvmlTest, ListsThisProcessWithItsContextAndMemory) {
  start({{"GPUSLICE_MOCK_MEMORY", "4294967296"}, {"GPUSLICE_MOCK_CONTEXT_BYTES", "1048576"}}, 1);
  CUdeviceptr pointer = 0;
  ASSERT_EQ(cuMemAlloc_v2(&pointer, 10 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  unsigned count = 0;
  ASSERT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(device_at(0), &count, nullptr), NVML_SUCCESS);
  EXPECT_EQ(count, 0u);
  EXPECT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(device_at(1), &count, nullptr),
            NVML_ERROR_INSUFFICIENT_SIZE);
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

// nvidia-smi's process table (abi/nvml_export_table.h): the same processes as the public lists, in
// its own entry layout and with names; the other slots answer without doing anything.
TEST_F(NvmlTest, TheProcessExportTableListsTheSameProcessesInItsLayout) {
  namespace ex = gpuslice::nvml_export;
  start({{"GPUSLICE_MOCK_MEMORY", "4294967296"}, {"GPUSLICE_MOCK_CONTEXT_BYTES", "1048576"}}, 1);
  CUdeviceptr pointer = 0;
  ASSERT_EQ(cuMemAlloc_v2(&pointer, 10 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  const void* table = nullptr;
  const unsigned char other_id[16] = {1, 2, 3};
  EXPECT_EQ(nvmlInternalGetExportTable(&table, other_id), NVML_ERROR_NOT_SUPPORTED);
  ASSERT_EQ(nvmlInternalGetExportTable(&table, ex::kProcessTableId), NVML_SUCCESS);
  const auto* words = static_cast<const std::uint64_t*>(table);
  ASSERT_GT(words[0], 8u * ex::kLastProcessListSlot);
  for (unsigned slot = ex::kFirstProcessListSlot; slot <= ex::kLastProcessListSlot; ++slot) {
    SCOPED_TRACE(slot);
    auto list = reinterpret_cast<ex::ProcessListFn>(static_cast<std::uintptr_t>(words[slot]));
    std::vector<unsigned char> entries(4 * ex::kEntryStride);
    unsigned count = 4;
    ASSERT_EQ(list(device_at(0), &count, entries.data(), nullptr), NVML_SUCCESS);
    EXPECT_EQ(count, 0u);
    count = 4;
    ASSERT_EQ(list(device_at(1), &count, entries.data(), nullptr), NVML_SUCCESS);
    ASSERT_EQ(count, 1u);
    std::uint32_t pid = 0;
    std::uint64_t used = 0;
    std::uint32_t instance = 0;
    std::memcpy(&pid, entries.data() + ex::kPidOffset, sizeof pid);
    std::memcpy(&used, entries.data() + ex::kUsedMemoryOffset, sizeof used);
    std::memcpy(&instance, entries.data() + ex::kGpuInstanceOffset, sizeof instance);
    EXPECT_EQ(pid, static_cast<unsigned>(getpid()));
    EXPECT_EQ(used, 11 * kMiB);
    EXPECT_EQ(instance, 0xFFFFFFFFu);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(entries.data() + ex::kNameOffset)),
              "process-" + std::to_string(getpid()));
    count = 0;
    EXPECT_EQ(list(device_at(1), &count, entries.data(), nullptr), NVML_ERROR_INSUFFICIENT_SIZE);
    EXPECT_EQ(count, 1u);
  }
  auto other = reinterpret_cast<nvmlReturn_t (*)(void*, void*)>(static_cast<std::uintptr_t>(words[230]));
  EXPECT_EQ(other(nullptr, nullptr), NVML_SUCCESS);
}

TEST_F(NvmlTest, TheDriverVersionCanBeSimulated) {
  set_env({{"GPUSLICE_MOCK_NVML_DRIVER_VERSION", "590.10.01"}});
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  char text[96] = {};
  ASSERT_EQ(nvmlSystemGetDriverVersion(text, sizeof text), NVML_SUCCESS);
  EXPECT_STREQ(text, "590.10.01");
  ASSERT_EQ(nvmlShutdown(), NVML_SUCCESS);
  set_env({{"GPUSLICE_MOCK_NVML_DRIVER_VERSION", "590 10"}});
  EXPECT_EQ(nvmlInit_v2(), NVML_ERROR_UNKNOWN);
}

// A child process that allocates on device 1 and reports 'R' (or 'E') through *ready_fd. Then it
// waits: to be killed, or, with exit_fd, for a byte there and a normal exit(0).
pid_t spawn_allocating_child(std::uint64_t bytes, int* ready_fd, int* exit_fd = nullptr) {
  int ready[2];
  int go[2];
  if (pipe(ready) != 0 || pipe(go) != 0) return -1;
  pid_t child = fork();
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a test that failed half-way
    close(ready[0]);
    close(go[1]);
    CUcontext context = nullptr;
    CUdeviceptr pointer = 0;
    char outcome = 'E';
    if (cuInit(0) == CUDA_SUCCESS && cuDevicePrimaryCtxRetain(&context, 1) == CUDA_SUCCESS &&
        cuCtxSetCurrent(context) == CUDA_SUCCESS && cuMemAlloc_v2(&pointer, bytes) == CUDA_SUCCESS) {
      outcome = 'R';
    }
    if (write(ready[1], &outcome, 1) != 1) _exit(2);
    if (exit_fd == nullptr) {
      for (;;) pause();  // killed by the parent, without any cleanup of its own
    }
    char byte = 0;
    if (read(go[0], &byte, 1) != 1) _exit(3);
    std::exit(0);  // the normal way out: library destructors run
  }
  close(ready[1]);
  close(go[0]);
  *ready_fd = ready[0];
  if (exit_fd != nullptr) {
    *exit_fd = go[1];
  } else {
    close(go[1]);
  }
  return child;
}

// Kills and reaps the child however the test ends, so a failed assertion leaves no process
// behind holding ctest's output pipe.
struct ChildGuard {
  pid_t pid;
  ~ChildGuard() { kill_and_reap(); }
  void kill_and_reap() {
    if (pid <= 0) return;
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    pid = -1;
  }
};

TEST_F(NvmlTest, AForkedChildsUsageIsVisibleUntilItIsKilled) {
  start({{"GPUSLICE_MOCK_MEMORY", "4294967296"}, {"GPUSLICE_MOCK_CONTEXT_BYTES", "8388608"}}, 1);
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  int ready_fd = -1;
  const pid_t child = spawn_allocating_child(64 * kMiB, &ready_fd);
  ASSERT_GT(child, 0);
  ChildGuard guard{child};
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

  guard.kill_and_reap();
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
  const pid_t child = spawn_allocating_child(900 * kMiB, &ready_fd);
  ASSERT_GT(child, 0);
  ChildGuard guard{child};
  char outcome = 0;
  ASSERT_EQ(read(ready_fd, &outcome, 1), 1);
  close(ready_fd);
  EXPECT_EQ(outcome, 'R');
  CUdeviceptr pointer = 0;
  EXPECT_EQ(cuMemAlloc_v2(&pointer, 512 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  guard.kill_and_reap();
  EXPECT_EQ(cuMemAlloc_v2(&pointer, 512 * kMiB), CUDA_SUCCESS);  // the dead child's share came back
  EXPECT_EQ(free_bytes(), 512 * kMiB);
}

TEST_F(NvmlTest, AProcessThatExitsGivesItsUsageBackItself) {
  set_env({{"GPUSLICE_MOCK_CONTEXT_BYTES", "1048576"}});
  int ready_fd = -1;
  int exit_fd = -1;
  const pid_t child = spawn_allocating_child(32 * kMiB, &ready_fd, &exit_fd);
  ASSERT_GT(child, 0);
  ChildGuard guard{child};
  char outcome = 0;
  ASSERT_EQ(read(ready_fd, &outcome, 1), 1);
  close(ready_fd);
  EXPECT_EQ(outcome, 'R');
  EXPECT_EQ(nvml_used(1), 33 * kMiB);
  ASSERT_EQ(write(exit_fd, "x", 1), 1);
  close(exit_fd);
  // Wait for the exit but leave the zombie: kill(pid, 0) still finds it, so only the child's own
  // release at exit can have returned the memory.
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT), 0);
  EXPECT_EQ(kill(child, 0), 0);
  EXPECT_EQ(nvml_used(1), 0u);
  int status = -1;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  guard.pid = -1;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
}

}  // namespace
}  // namespace gpuslice::mock::testing
