// What the RM probe (rm_alloc_probe.so) costs and sees, run with and without it preloaded by
// bench/gpu/rm_alloc_round.py (interleaved A/B). Modes:
//   rm_alloc_cost cost [ITERS]        cuMemAlloc/cuMemFree of 2 MiB and 64 MiB, ITERS each (2000), then
//                                     empty-kernel launches (ITERS x 100, timed in batches of 1000)
//   rm_alloc_cost hold BYTES SECONDS  one cuMemAlloc of BYTES, written, held (the calibration case)
// hold ends with "probe_nv_ioctls=N": the ioctls the probe saw on NVIDIA devices up to that line.
// Prints "alloc bytes=.. iters=.. alloc_ns=.. free_ns=.. ioctls_per_alloc=.. ioctls_per_free=.." and
// "launch iters=.. ns=.. ioctls_per_launch=..": ns are medians of per-call (alloc, free) or per-batch
// (launch) host times; ioctl counts come from the probe's rm_probe_count() when it is preloaded (-1 without).
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using CountFn = uint64_t (*)(int);

CountFn probe_count() { return reinterpret_cast<CountFn>(dlsym(RTLD_DEFAULT, "rm_probe_count")); }
// Every ioctl the probe saw on an NVIDIA device: RM escapes, nvidia-uvm, the others.
uint64_t ioctls(CountFn f) { return f != nullptr ? f(257) + f(256) + f(259) : 0; }
int64_t ns_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
}
int64_t median(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

__global__ void empty() {}

int check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "%s failed: %d\n", what, static_cast<int>(r));
    std::exit(1);
  }
  return 0;
}

void alloc_loop(size_t bytes, int iters, CountFn count) {
  std::vector<int64_t> a, f;
  a.reserve(static_cast<size_t>(iters));
  f.reserve(static_cast<size_t>(iters));
  uint64_t in_alloc = 0, in_free = 0;
  for (int i = 0; i < 50; ++i) {  // warm the driver's paths
    CUdeviceptr p = 0;
    check(cuMemAlloc(&p, bytes), "cuMemAlloc");
    check(cuMemFree(p), "cuMemFree");
  }
  for (int i = 0; i < iters; ++i) {
    CUdeviceptr p = 0;
    const uint64_t c0 = ioctls(count);
    auto t0 = Clock::now();
    check(cuMemAlloc(&p, bytes), "cuMemAlloc");
    a.push_back(ns_since(t0));
    const uint64_t c1 = ioctls(count);
    t0 = Clock::now();
    check(cuMemFree(p), "cuMemFree");
    f.push_back(ns_since(t0));
    in_alloc += c1 - c0;
    in_free += ioctls(count) - c1;
  }
  std::printf(
      "alloc bytes=%zu iters=%d alloc_ns=%lld free_ns=%lld ioctls_per_alloc=%.2f ioctls_per_free=%.2f\n",
      bytes, iters, static_cast<long long>(median(a)), static_cast<long long>(median(f)),
      count != nullptr ? static_cast<double>(in_alloc) / iters : -1.0,
      count != nullptr ? static_cast<double>(in_free) / iters : -1.0);
}

void launch_loop(int batches, CountFn count) {
  constexpr int kBatch = 1000;
  std::vector<int64_t> per;
  for (int i = 0; i < 5; ++i) empty<<<1, 1>>>();
  cudaDeviceSynchronize();
  const uint64_t c0 = ioctls(count);
  for (int b = 0; b < batches; ++b) {
    const auto t0 = Clock::now();
    for (int i = 0; i < kBatch; ++i) empty<<<1, 1>>>();
    per.push_back(ns_since(t0) / kBatch);
    cudaDeviceSynchronize();
  }
  const uint64_t c1 = ioctls(count);
  std::printf("launch iters=%d ns=%lld ioctls_per_launch=%.4f\n", batches * kBatch,
              static_cast<long long>(median(per)),
              count != nullptr ? static_cast<double>(c1 - c0) / (batches * kBatch) : -1.0);
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const char* mode = argc > 1 ? argv[1] : "";
  check(cuInit(0), "cuInit");
  cudaSetDevice(0);
  cudaFree(nullptr);  // the primary context, current for the driver calls too
  const CountFn count = probe_count();
  if (std::strcmp(mode, "cost") == 0) {
    const int iters = argc > 2 ? std::atoi(argv[2]) : 2000;
    alloc_loop(2u << 20, iters, count);
    alloc_loop(64u << 20, iters, count);
    launch_loop(iters / 10, count);
    return 0;
  }
  if (std::strcmp(mode, "hold") == 0 && argc > 3) {
    const size_t bytes = std::strtoull(argv[2], nullptr, 0);
    CUdeviceptr p = 0;
    sleep(1);  // the context alone first, as its own step
    check(cuMemAlloc(&p, bytes), "cuMemAlloc");
    check(cuMemsetD8(p, 1, bytes), "cuMemsetD8");
    cuCtxSynchronize();
    std::printf("held=%zu\n", bytes);
    sleep(static_cast<unsigned>(std::atoi(argv[3])));
    check(cuMemFree(p), "cuMemFree");
    usleep(500 * 1000);
    // For the strace cross-check: what the probe saw up to this write (the driver's teardown comes after).
    std::printf("probe_nv_ioctls=%lld\n", count != nullptr ? static_cast<long long>(ioctls(count)) : -1LL);
    return 0;
  }
  std::fprintf(stderr, "usage: rm_alloc_cost cost [ITERS] | hold BYTES SECONDS\n");
  return 2;
}
