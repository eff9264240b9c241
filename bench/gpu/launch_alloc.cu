// Hook-path microbenchmark on a real GPU: empty-kernel launches and cudaMalloc/cudaFree pairs.
// bench/gpu/overhead.py runs it with and without libgpuslice.so, interleaved, and reports ratios.
// Usage: launch_alloc launches N | alloc N
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

__global__ void empty_kernel() {}

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  long n = std::atol(argv[2]);
  cudaFree(nullptr);  // create the context outside the timed region
  empty_kernel<<<1, 1>>>();
  cudaDeviceSynchronize();
  using clock = std::chrono::steady_clock;
  if (std::strcmp(argv[1], "launches") == 0) {
    auto t0 = clock::now();
    for (long i = 0; i < n; ++i) empty_kernel<<<1, 1>>>();
    cudaDeviceSynchronize();
    double ns = std::chrono::duration<double, std::nano>(clock::now() - t0).count() / static_cast<double>(n);
    std::printf("launch_ns=%.1f err=%s\n", ns, cudaGetErrorName(cudaGetLastError()));
  } else {
    auto t0 = clock::now();
    for (long i = 0; i < n; ++i) {
      void* p = nullptr;
      cudaMalloc(&p, 1 << 20);
      cudaFree(p);
    }
    double ns = std::chrono::duration<double, std::nano>(clock::now() - t0).count() / static_cast<double>(n);
    std::printf("alloc_free_ns=%.1f err=%s\n", ns, cudaGetErrorName(cudaGetLastError()));
  }
  return 0;
}
