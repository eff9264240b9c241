// The program's own image holds 3 x 4 GiB of __device__ arrays (tests/gpu/driver_paths.py, case
// "globals"): the runtime registers the fat binary, the driver takes the globals at the first launch
// (lazy loading, the default) or at the load (CUDA_MODULE_LOADING=EAGER). Under an 8 GiB quota the
// launch (or the runtime's first call) must fail with an out-of-memory error before the driver
// takes them. Prints what the CUDA calls answered.
// With the argument "first" (case "globals_first"): cuInit, then the launch with no context created
// before it (tests/gpu/mps_backstop.cu's order): the runtime loads its fat binary as a library
// while no context exists, then creates the primary context and launches.
#include <cuda.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

__device__ char g_a0[4ULL << 30];
__device__ char g_a1[4ULL << 30];
__device__ char g_a2[4ULL << 30];

__global__ void touch(unsigned long long i) {
  g_a0[i] = 1;
  g_a1[i] = 2;
  g_a2[i] = 3;
}

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc > 1 && std::strcmp(argv[1], "first") == 0) {
    std::printf("init=%d\n", static_cast<int>(cuInit(0)));
  } else {
    std::printf("set_device=%d\n", static_cast<int>(cudaSetDevice(0)));
    std::printf("free_call=%d\n", static_cast<int>(cudaFree(nullptr)));
  }
  touch<<<1, 1>>>(12345);
  std::printf("launch=%d\n", static_cast<int>(cudaGetLastError()));
  std::printf("sync=%d\n", static_cast<int>(cudaDeviceSynchronize()));
  sleep(2);
  return 0;
}
