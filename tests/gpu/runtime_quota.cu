// The quota (docs/quota.md) on a real GPU through the CUDA runtime (which reaches the driver only via
// cuGetProcAddress_v2): the reported total is the quota, allocations fit under it, the next one
// fails with cudaErrorMemoryAllocation, and after a free it succeeds again.
// Usage: runtime_quota DEVICE EXPECTED_QUOTA_BYTES
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  int dev = argc > 1 ? std::atoi(argv[1]) : 0;
  unsigned long long quota = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 0;
  const size_t chunk = 256ULL << 20;
  if (cudaSetDevice(dev) != cudaSuccess) {
    std::printf("RESULT runtime_quota dev=%d FAIL cudaSetDevice\n", dev);
    return 1;
  }
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, dev);
  std::printf("dev=%d name=%s memgetinfo_total=%zu memgetinfo_free=%zu prop_totalGlobalMem=%zu\n", dev, prop.name,
              total_b, free_b, prop.totalGlobalMem);
  std::vector<void*> ptrs;
  cudaError_t err = cudaSuccess;
  for (int i = 0; i < 4096; ++i) {
    void* p = nullptr;
    err = cudaMalloc(&p, chunk);
    if (err != cudaSuccess) break;
    ptrs.push_back(p);
  }
  cudaGetLastError();
  size_t allocated = ptrs.size() * chunk;
  std::printf("allocated=%zu (%zu chunks of 256 MiB) refusal=%s\n", allocated, ptrs.size(), cudaGetErrorName(err));
  size_t f2 = 0, t2 = 0;
  cudaMemGetInfo(&f2, &t2);
  cudaFree(ptrs.back());
  ptrs.pop_back();
  void* again = nullptr;
  cudaError_t retry = cudaMalloc(&again, chunk);
  std::printf("after_fill_free=%zu retry_after_free=%s\n", f2, cudaGetErrorName(retry));
  if (retry == cudaSuccess) ptrs.push_back(again);
  for (void* p : ptrs) cudaFree(p);
  size_t f3 = 0, t3 = 0;
  cudaMemGetInfo(&f3, &t3);
  std::printf("end_free=%zu\n", f3);
  bool ok = total_b == quota && prop.totalGlobalMem == quota && err == cudaErrorMemoryAllocation &&
            allocated <= quota && allocated + 2 * chunk + (1ULL << 30) >= quota && retry == cudaSuccess;
  std::printf("RESULT runtime_quota dev=%d quota=%llu %s\n", dev, quota, ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
