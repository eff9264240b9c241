// The kernel timing model: device timelines, synchronisation, events, NVML utilization.
// Everything but the first test runs on the mock's simulated clock (GPUSLICE_MOCK_FAKE_CLOCK),
// so the assertions are exact and independent of the machine's speed.
#include <time.h>
#include <unistd.h>

#include "mock_fixture.h"

namespace gpuslice::mock::testing {
namespace {

constexpr const char* kStart = "1000000000";  // simulated clock starts at 1 s
constexpr std::uint64_t kStartNs = 1'000'000'000;
constexpr std::uint64_t kMs = 1'000'000;

std::uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(ts.tv_nsec);
}

class TimingTest : public MockDriverTest {
 protected:
  CUfunction kernel(const char* name) {
    if (module_ == nullptr) {
      static const char kImage[] = "any non-null image";
      EXPECT_EQ(cuModuleLoadData(&module_, kImage), CUDA_SUCCESS);
    }
    CUfunction function = nullptr;
    EXPECT_EQ(cuModuleGetFunction(&function, module_, name), CUDA_SUCCESS);
    return function;
  }

  static CUresult launch(CUfunction function, CUstream stream = nullptr) {
    return cuLaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, stream, nullptr, nullptr);
  }

  CUmodule module_ = nullptr;
};

TEST_F(TimingTest, SynchronizeWaitsForASleepKernelInRealTime) {
  start();
  CUfunction sleeper = kernel("sleep_2000us");
  const std::uint64_t before = monotonic_ns();
  ASSERT_EQ(launch(sleeper), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);
  EXPECT_GE(monotonic_ns() - before, 2 * kMs);  // lower bound only: the machine may be slow
  EXPECT_EQ(cuStreamQuery(nullptr), CUDA_SUCCESS);
}

TEST_F(TimingTest, StreamsOfADeviceShareOneTimeline) {
  start({{"GPUSLICE_MOCK_FAKE_CLOCK", kStart}});
  CUstream first = nullptr;
  CUstream second = nullptr;
  ASSERT_EQ(cuStreamCreate(&first, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&second, 1), CUDA_SUCCESS);
  CUevent begin = nullptr;
  CUevent first_done = nullptr;
  CUevent second_done = nullptr;
  for (CUevent* event : {&begin, &first_done, &second_done}) ASSERT_EQ(cuEventCreate(event, 0), CUDA_SUCCESS);

  ASSERT_EQ(cuEventRecord(begin, first), CUDA_SUCCESS);
  ASSERT_EQ(launch(kernel("sleep_1000us"), first), CUDA_SUCCESS);
  ASSERT_EQ(launch(kernel("sleep_2000us"), second), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(first_done, first), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(second_done, second), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(first), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuEventQuery(second_done), CUDA_ERROR_NOT_READY);
  float ms = 0;
  EXPECT_EQ(cuEventElapsedTime_v2(&ms, begin, second_done), CUDA_ERROR_NOT_READY);

  ASSERT_EQ(cuStreamSynchronize(first), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(first), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(second), CUDA_ERROR_NOT_READY);  // queued behind the first on the device
  ASSERT_EQ(cuEventSynchronize(second_done), CUDA_SUCCESS);
  ASSERT_EQ(cuEventElapsedTime_v2(&ms, begin, first_done), CUDA_SUCCESS);
  EXPECT_FLOAT_EQ(ms, 1.0f);
  ASSERT_EQ(cuEventElapsedTime_v2(&ms, begin, second_done), CUDA_SUCCESS);
  EXPECT_FLOAT_EQ(ms, 3.0f);
  ASSERT_EQ(cuEventElapsedTime_v2(&ms, second_done, begin), CUDA_SUCCESS);
  EXPECT_FLOAT_EQ(ms, -3.0f);
}

TEST_F(TimingTest, EveryLaunchPathTakesDeviceTime) {
  start({{"GPUSLICE_MOCK_FAKE_CLOCK", kStart}, {"GPUSLICE_MOCK_KERNEL_NS", "7000"}});
  CUfunction plain = kernel("gemm");
  CUevent begin = nullptr;
  CUevent end = nullptr;
  ASSERT_EQ(cuEventCreate(&begin, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&end, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(begin, nullptr), CUDA_SUCCESS);
  CUlaunchConfig config{1, 1, 1, 64, 1, 1, 0, nullptr, nullptr, 0};
  ASSERT_EQ(launch(plain), CUDA_SUCCESS);
  ASSERT_EQ(cuLaunchKernel_ptsz(plain, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuLaunchKernelEx(&config, plain, nullptr, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuLaunchKernelEx_ptsz(&config, plain, nullptr, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuLaunchCooperativeKernel(plain, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuLaunchCooperativeKernel_ptsz(plain, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr), CUDA_SUCCESS);
  auto graph = reinterpret_cast<CUgraphExec>(0x1000);  // the mock takes any executable graph as one kernel
  ASSERT_EQ(cuGraphLaunch(graph, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch_ptsz(graph, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(end, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  float ms = 0;
  ASSERT_EQ(cuEventElapsedTime_v2(&ms, begin, end), CUDA_SUCCESS);
  EXPECT_FLOAT_EQ(ms, 8 * 0.007f);
  ASSERT_EQ(gpuslice_mock_advance_clock_ns(5 * kMs), 0);
  ASSERT_EQ(cuEventRecord(end, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuEventElapsedTime_v2(&ms, begin, end), CUDA_SUCCESS);
  EXPECT_FLOAT_EQ(ms, 5.056f);
}

// What the compute limiter's busy probe relies on: events recorded just before and just after a
// launch span exactly its kernel's device time, whatever host time passes between launches; on a
// device busy with another stream's work the pair also holds the wait (an overestimate).
TEST_F(TimingTest, EventsAroundALaunchSpanItsDeviceTimeNotTheHostGaps) {
  start({{"GPUSLICE_MOCK_FAKE_CLOCK", kStart}});
  CUfunction short_kernel = kernel("sleep_50us");
  CUfunction long_kernel = kernel("sleep_1000us");
  CUevent events[6] = {};
  for (CUevent& event : events) ASSERT_EQ(cuEventCreate(&event, 0), CUDA_SUCCESS);
  CUstream mine = nullptr;
  CUstream other = nullptr;
  ASSERT_EQ(cuStreamCreate(&mine, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&other, 0), CUDA_SUCCESS);
  for (int step = 0; step < 2; ++step) {  // a kernel, then 1 ms of host work
    ASSERT_EQ(cuEventRecord(events[2 * step], mine), CUDA_SUCCESS);
    ASSERT_EQ(launch(short_kernel, mine), CUDA_SUCCESS);
    ASSERT_EQ(cuEventRecord(events[2 * step + 1], mine), CUDA_SUCCESS);
    ASSERT_EQ(gpuslice_mock_advance_clock_ns(kMs), 0);
  }
  ASSERT_EQ(launch(long_kernel, other), CUDA_SUCCESS);  // the device is busy with another stream
  ASSERT_EQ(cuEventRecord(events[4], mine), CUDA_SUCCESS);
  ASSERT_EQ(launch(short_kernel, mine), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(events[5], mine), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  float ms = 0;
  for (int step = 0; step < 2; ++step) {
    ASSERT_EQ(cuEventElapsedTime_v2(&ms, events[2 * step], events[2 * step + 1]), CUDA_SUCCESS);
    EXPECT_FLOAT_EQ(ms, 0.05f);
  }
  ASSERT_EQ(cuEventElapsedTime_v2(&ms, events[1], events[2]), CUDA_SUCCESS);
  EXPECT_FLOAT_EQ(ms, 0.95f);  // the host gap: the device idle
  ASSERT_EQ(cuEventElapsedTime_v2(&ms, events[4], events[5]), CUDA_SUCCESS);
  EXPECT_FLOAT_EQ(ms, 1.05f);
}

TEST_F(TimingTest, AFullLaunchQueueMakesTheLaunchWait) {
  start({{"GPUSLICE_MOCK_FAKE_CLOCK", kStart}, {"GPUSLICE_MOCK_QUEUE_DEPTH", "4"}});
  CUfunction sleeper = kernel("sleep_1000us");
  CUevent begin = nullptr;
  CUevent now = nullptr;
  ASSERT_EQ(cuEventCreate(&begin, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&now, 0), CUDA_SUCCESS);
  CUstream idle = nullptr;
  ASSERT_EQ(cuStreamCreate(&idle, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(begin, idle), CUDA_SUCCESS);
  for (int i = 0; i < 6; ++i) ASSERT_EQ(launch(sleeper), CUDA_SUCCESS);
  // The 5th and 6th launch each waited for the oldest kernel in the queue: 2 ms have passed.
  ASSERT_EQ(cuEventRecord(now, idle), CUDA_SUCCESS);
  float ms = 0;
  ASSERT_EQ(cuEventElapsedTime_v2(&ms, begin, now), CUDA_SUCCESS);
  EXPECT_FLOAT_EQ(ms, 2.0f);
  EXPECT_EQ(cuStreamQuery(nullptr), CUDA_ERROR_NOT_READY);
}

TEST_F(TimingTest, LaunchesValidateTheirArguments) {
  start({{"GPUSLICE_MOCK_FAKE_CLOCK", kStart}});
  CUfunction function = kernel("sleep_10us");
  EXPECT_EQ(cuLaunchKernel(function, 0, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLaunchKernelEx(nullptr, function, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphLaunch(nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  CUstream stream = nullptr;
  ASSERT_EQ(cuStreamCreate(&stream, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamDestroy_v2(stream), CUDA_SUCCESS);
  EXPECT_EQ(launch(function, stream), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamDestroy_v2(stream), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamDestroy_v2(nullptr), CUDA_ERROR_INVALID_HANDLE);
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  ASSERT_EQ(cuStreamIsCapturing(nullptr, &capture), CUDA_SUCCESS);
  EXPECT_EQ(capture, CU_STREAM_CAPTURE_STATUS_NONE);
  ASSERT_EQ(cuModuleUnload(module_), CUDA_SUCCESS);
  module_ = nullptr;
  EXPECT_EQ(launch(function), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuModuleLoadData(&module_, nullptr), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(launch(function), CUDA_ERROR_INVALID_CONTEXT);
}

TEST_F(TimingTest, EventsBehaveLikeTheDriver) {
  start({{"GPUSLICE_MOCK_FAKE_CLOCK", kStart}});
  CUevent never_recorded = nullptr;
  CUevent untimed = nullptr;
  CUevent timed = nullptr;
  ASSERT_EQ(cuEventCreate(&never_recorded, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&untimed, 0x2), CUDA_SUCCESS);  // CU_EVENT_DISABLE_TIMING
  ASSERT_EQ(cuEventCreate(&timed, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuEventCreate(&timed, 0x100), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuEventQuery(never_recorded), CUDA_SUCCESS);
  EXPECT_EQ(cuEventSynchronize(never_recorded), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(untimed, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(timed, nullptr), CUDA_SUCCESS);
  float ms = 0;
  EXPECT_EQ(cuEventElapsedTime_v2(&ms, never_recorded, timed), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventElapsedTime_v2(&ms, untimed, timed), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventElapsedTime_v2(nullptr, timed, timed), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuEventDestroy_v2(timed), CUDA_SUCCESS);
  EXPECT_EQ(cuEventRecord(timed, nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventDestroy_v2(timed), CUDA_ERROR_INVALID_HANDLE);
}

// GPUSLICE_MOCK_CAPTURING=per-thread: the calling thread's default stream says it is being captured
// (CU_STREAM_PER_THREAD, or 0 through the _ptsz entry point); the legacy and created streams do
// not. Any other value refuses to initialise.
TEST_F(TimingTest, ThePerThreadStreamSaysItIsCapturedOnlyWhenAsked) {
  start({{"GPUSLICE_MOCK_CAPTURING", "per-thread"}});
  CUstream created = nullptr;
  ASSERT_EQ(cuStreamCreate(&created, 0), CUDA_SUCCESS);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  EXPECT_EQ(cuStreamIsCapturing(CU_STREAM_PER_THREAD, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_EQ(cuStreamIsCapturing_ptsz(nullptr, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  for (CUstream other : {static_cast<CUstream>(nullptr), CU_STREAM_LEGACY, created}) {
    EXPECT_EQ(cuStreamIsCapturing(other, &status), CUDA_SUCCESS);
    EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);
  }
  EXPECT_EQ(cuStreamDestroy_v2(created), CUDA_SUCCESS);
  gpuslice_mock_reset();
  set_env({{"GPUSLICE_MOCK_CAPTURING", "yes"}});
  EXPECT_NE(cuInit(0), CUDA_SUCCESS);
}

TEST_F(TimingTest, SynchronousCopiesWaitForQueuedKernels) {
  start({{"GPUSLICE_MOCK_FAKE_CLOCK", kStart}});
  CUdeviceptr pointer = 0;
  ASSERT_EQ(cuMemAlloc_v2(&pointer, 64), CUDA_SUCCESS);
  ASSERT_EQ(launch(kernel("sleep_500us")), CUDA_SUCCESS);
  char host[64] = {};
  ASSERT_EQ(cuMemcpyDtoHAsync_v2(host, pointer, sizeof(host), nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(nullptr), CUDA_ERROR_NOT_READY);  // the async copy did not wait
  ASSERT_EQ(cuMemcpyDtoH_v2(host, pointer, sizeof(host)), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(nullptr), CUDA_SUCCESS);
}

nvmlDevice_t nvml_device(unsigned index) {
  nvmlDevice_t device = nullptr;
  EXPECT_EQ(nvmlDeviceGetHandleByIndex_v2(index, &device), NVML_SUCCESS);
  return device;
}

TEST_F(TimingTest, UtilizationIsTheBusyShareOfTheLastSecond) {
  start({{"GPUSLICE_MOCK_FAKE_CLOCK", kStart}});
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  nvmlUtilization_t utilization{};
  ASSERT_EQ(nvmlDeviceGetUtilizationRates(nvml_device(0), &utilization), NVML_SUCCESS);
  EXPECT_EQ(utilization.gpu, 0u);

  ASSERT_EQ(launch(kernel("sleep_200000us")), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  ASSERT_EQ(gpuslice_mock_advance_clock_ns(300 * kMs), 0);
  ASSERT_EQ(nvmlDeviceGetUtilizationRates(nvml_device(0), &utilization), NVML_SUCCESS);
  EXPECT_EQ(utilization.gpu, 20u);
  ASSERT_EQ(nvmlDeviceGetUtilizationRates(nvml_device(1), &utilization), NVML_SUCCESS);
  EXPECT_EQ(utilization.gpu, 0u);

  nvmlProcessUtilizationSample_t samples[4] = {};
  unsigned count = 0;
  EXPECT_EQ(nvmlDeviceGetProcessUtilization(nvml_device(0), nullptr, &count, 0),
            NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(count, 1u);
  count = 4;
  ASSERT_EQ(nvmlDeviceGetProcessUtilization(nvml_device(0), samples, &count, 0), NVML_SUCCESS);
  ASSERT_EQ(count, 1u);
  EXPECT_EQ(samples[0].pid, static_cast<unsigned>(getpid()));
  EXPECT_EQ(samples[0].smUtil, 20u);
  EXPECT_EQ(samples[0].timeStamp, (kStartNs + 500 * kMs) / 1000);
  EXPECT_EQ(nvmlDeviceGetProcessUtilization(nvml_device(0), samples, &count, samples[0].timeStamp),
            NVML_ERROR_NOT_FOUND);  // nothing newer than what the caller has seen

  // Work queued into the future counts only once its time has come.
  ASSERT_EQ(launch(kernel("sleep_2000000us")), CUDA_SUCCESS);
  ASSERT_EQ(gpuslice_mock_advance_clock_ns(1000 * kMs), 0);
  ASSERT_EQ(nvmlDeviceGetUtilizationRates(nvml_device(0), &utilization), NVML_SUCCESS);
  EXPECT_EQ(utilization.gpu, 100u);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  ASSERT_EQ(gpuslice_mock_advance_clock_ns(1500 * kMs), 0);
  ASSERT_EQ(nvmlDeviceGetUtilizationRates(nvml_device(0), &utilization), NVML_SUCCESS);
  EXPECT_EQ(utilization.gpu, 0u);
  count = 4;
  EXPECT_EQ(nvmlDeviceGetProcessUtilization(nvml_device(0), samples, &count, 0), NVML_ERROR_NOT_FOUND);
  ASSERT_EQ(nvmlShutdown(), NVML_SUCCESS);
}

}  // namespace
}  // namespace gpuslice::mock::testing
