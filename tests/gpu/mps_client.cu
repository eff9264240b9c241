// One MPS client for tests/gpu/mps_faults.sh: `spin SECONDS` launches ~1 ms kernels and syncs,
// printing a progress line every 200 ms ("t_ms=... iter=... ok") and the first error it meets
// ("t_ms=... error=NAME code=N") before exiting 1; `fault DELAY_MS` waits, then runs a kernel that
// writes to an illegal address and reports what the sync returned.
#include <cuda_runtime.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace {

__global__ void busy(unsigned long long cycles, int* sink) {
  const unsigned long long start = clock64();
  while (clock64() - start < cycles) {
  }
  if (threadIdx.x == 0 && blockIdx.x == 0) atomicAdd(sink, 1);
}

__global__ void write_to(int* p) { *p = 1; }

long long now_ms(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
}

int report(cudaError_t e, std::chrono::steady_clock::time_point t0, long long iter) {
  std::printf("t_ms=%lld iter=%lld error=%s code=%d\n", now_ms(t0), iter, cudaGetErrorName(e), static_cast<int>(e));
  std::fflush(stdout);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s spin SECONDS | fault DELAY_MS\n", argv[0]);
    return 2;
  }
  const auto t0 = std::chrono::steady_clock::now();
  int* sink = nullptr;
  if (cudaError_t e = cudaMalloc(&sink, sizeof(int)); e != cudaSuccess) return report(e, t0, 0);
  std::printf("t_ms=%lld ready pid=%d\n", now_ms(t0), static_cast<int>(getpid()));
  std::fflush(stdout);
  if (std::strcmp(argv[1], "fault") == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(argv[2])));
    write_to<<<1, 1>>>(reinterpret_cast<int*>(0x10));
    cudaError_t e = cudaDeviceSynchronize();
    return report(e == cudaSuccess ? cudaErrorUnknown : e, t0, 1);
  }
  const long long until_ms = std::atoll(argv[2]) * 1000;
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  const unsigned long long cycles = static_cast<unsigned long long>(clock_khz > 0 ? clock_khz : 1500000);  // ~1 ms
  long long iter = 0, last_print = -1000;
  while (now_ms(t0) < until_ms) {
    busy<<<132, 128>>>(cycles, sink);
    if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) return report(e, t0, iter);
    ++iter;
    if (now_ms(t0) - last_print >= 200) {
      last_print = now_ms(t0);
      std::printf("t_ms=%lld iter=%lld ok\n", last_print, iter);
      std::fflush(stdout);
    }
  }
  std::printf("t_ms=%lld iter=%lld done\n", now_ms(t0), iter);
  return 0;
}
