// The two ways past the books that MPS's per-client pinned-memory limit is to hold (issue 41,
// docs/priority.md#mps-or-time-slices), one per run:
//   mps_backstop contexts   cuCtxCreate up to 64 contexts on device 0 (each takes device memory
//                           the driver keeps for itself), holding them all
//   mps_backstop globals    a kernel touching 3 x 4 GiB of this program's own __device__ globals
//                           (loaded lazily with the module)
// Prints key=value lines (created=, code=) and holds what it got for --hold seconds, so the caller
// can read the driver's per-process figure. Exit 0 unless the driver misbehaves unexpectedly.
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

__device__ char g_a[4ULL << 30];
__device__ char g_b[4ULL << 30];
__device__ char g_c[4ULL << 30];

__global__ void touch() {
  const unsigned long long i = (blockIdx.x * 1ULL * blockDim.x + threadIdx.x) * 4096ULL;
  if (i < (4ULL << 30)) {
    g_a[i] = 1;
    g_b[i] = 2;
    g_c[i] = 3;
  }
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "contexts";
  const int hold = argc > 2 ? std::atoi(argv[2]) : 5;
  CUresult r = cuInit(0);
  std::printf("init=%d\n", static_cast<int>(r));
  if (r != CUDA_SUCCESS) return 0;
  CUdevice dev = 0;
  cuDeviceGet(&dev, 0);
  if (std::strcmp(mode, "contexts") == 0) {
    CUcontext ctx[64] = {};
    int created = 0;
    for (; created < 64; ++created) {
      r = cuCtxCreate(&ctx[created], nullptr, 0, dev);
      if (r != CUDA_SUCCESS) break;
    }
    std::printf("created=%d\ncode=%d\n", created, static_cast<int>(r));
    std::fflush(stdout);
    sleep(hold);
    for (int i = 0; i < created; ++i) cuCtxDestroy(ctx[i]);
    return 0;
  }
  // globals: the runtime loads the module (and its 12 GiB of globals) at the first launch.
  touch<<<(4ULL << 30) / 4096 / 256, 256>>>();
  const cudaError_t launched = cudaGetLastError();
  const cudaError_t done = cudaDeviceSynchronize();
  std::printf("launch=%d\nsync=%d\n", static_cast<int>(launched), static_cast<int>(done));
  std::fflush(stdout);
  sleep(hold);
  return 0;
}
