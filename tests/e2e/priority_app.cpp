// A CUDA "application" for the priority end-to-end test, linked to libcuda.so.1 (the mock driver).
//   priority_app --epoch-ns E --seconds S --kernel-us K --step N [--busy-from-ms A --busy-to-ms B]
//                [--ptsz 1] [--threads 2] [--host-us H]
// Without --busy-*: a trainer that launches steps of N kernels of K us and synchronises after each,
// for S seconds from E (CLOCK_MONOTONIC), and prints the kernels completed per 50 ms bucket since E
// ("buckets=n0,n1,..."). With --busy-*: a server that idles until E + A, then runs steps until
// E + B (busy), then idles until E + S. --ptsz 1 launches through cuLaunchKernel_ptsz on stream 0
// (the calling thread's default stream, as a program built for per-thread default streams does).
// --threads 2 launches the second half of each step from another thread, on the same stream (as
// PyTorch's backward pass does from its autograd thread), before the main thread synchronises.
// --host-us H: H us of host work after each launch (an eager server: the device idle meanwhile).
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "abi/cuda_abi.h"

namespace {

constexpr std::uint64_t kBucketNs = 50'000'000;

std::uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(ts.tv_nsec);
}

void sleep_until(std::uint64_t t) {
  timespec ts{static_cast<time_t>(t / 1'000'000'000ULL), static_cast<long>(t % 1'000'000'000ULL)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) != 0) {
  }
}

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    std::printf("error=%s code=%d\n", what, static_cast<int>(r));
    std::exit(2);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t epoch = 0;
  double seconds = 1;
  int kernel_us = 200;
  int step = 10;
  long busy_from_ms = -1;
  long busy_to_ms = -1;
  bool ptsz = false;
  int threads = 1;
  long host_us = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const char* v = argv[i + 1];
    if (a == "--epoch-ns") {
      epoch = std::strtoull(v, nullptr, 10);
    } else if (a == "--seconds") {
      seconds = std::strtod(v, nullptr);
    } else if (a == "--kernel-us") {
      kernel_us = std::atoi(v);
    } else if (a == "--step") {
      step = std::atoi(v);
    } else if (a == "--busy-from-ms") {
      busy_from_ms = std::atol(v);
    } else if (a == "--busy-to-ms") {
      busy_to_ms = std::atol(v);
    } else if (a == "--ptsz") {
      ptsz = std::atoi(v) != 0;
    } else if (a == "--threads") {
      threads = std::atoi(v);
    } else if (a == "--host-us") {
      host_us = std::atol(v);
    } else {
      std::printf("error=unknown_option %s\n", a.c_str());
      return 2;
    }
  }
  check(cuInit(0), "cuInit");
  CUdevice dev = 0;
  check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  CUcontext ctx = nullptr;
  check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  static const char image[] = "mock-module";
  CUmodule mod = nullptr;
  check(cuModuleLoadData(&mod, image), "cuModuleLoadData");
  CUfunction fn = nullptr;
  const std::string name = "sleep_" + std::to_string(kernel_us) + "us";
  check(cuModuleGetFunction(&fn, mod, name.c_str()), "cuModuleGetFunction");
  // One tiny kernel attaches the device, so this container's record is on the node channel from
  // the start (as a server that loaded its model).
  CUfunction tiny = nullptr;
  check(cuModuleGetFunction(&tiny, mod, "sleep_1us"), "cuModuleGetFunction");
  check(cuLaunchKernel(tiny, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr), "launch");
  check(cuCtxSynchronize(), "cuCtxSynchronize");
  std::printf("ready=1\n");
  std::fflush(stdout);

  const auto end = epoch + static_cast<std::uint64_t>(seconds * 1e9);
  std::uint64_t from = epoch;
  std::uint64_t until = end;
  if (busy_from_ms >= 0) {
    from = epoch + static_cast<std::uint64_t>(busy_from_ms) * 1'000'000ULL;
    until = epoch + static_cast<std::uint64_t>(busy_to_ms) * 1'000'000ULL;
  }
  std::vector<long> buckets((end - epoch) / kBucketNs + 1, 0);
  auto launch = [&](int n) {
    for (int k = 0; k < n; ++k) {
      check(ptsz ? cuLaunchKernel_ptsz(fn, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr)
                 : cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr),
            "launch");
      if (host_us > 0) sleep_until(now_ns() + static_cast<std::uint64_t>(host_us) * 1000ULL);
    }
  };
  sleep_until(from);
  while (now_ns() < until) {
    if (threads == 2) {
      launch(step / 2);
      std::thread other([&] {
        check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
        launch(step - step / 2);
      });
      other.join();
    } else {
      launch(step);
    }
    check(cuCtxSynchronize(), "cuCtxSynchronize");
    const std::uint64_t t = now_ns();
    if (t >= epoch && t < end) buckets[(t - epoch) / kBucketNs] += step;
  }
  sleep_until(end);
  std::string text;
  for (const long n : buckets) text += (text.empty() ? "" : ",") + std::to_string(n);
  std::printf("buckets=%s\n", text.c_str());
  return 0;
}
