// Under a profiler or sanitizer: is libgpuslice.so loaded, which environment did the target get, and
// does the quota hold? Prints the facts, then the quota view and a refused allocation.
// Usage: tool_probe EXPECTED_QUOTA_BYTES
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

int main(int argc, char** argv) {
  unsigned long long quota = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 0;
  const char* pre = std::getenv("LD_PRELOAD");
  const char* inj = std::getenv("CUDA_INJECTION64_PATH");
  std::printf("env LD_PRELOAD=%s\nenv CUDA_INJECTION64_PATH=%s\n", pre ? pre : "(unset)", inj ? inj : "(unset)");
  std::ifstream maps("/proc/self/maps");
  std::string line;
  bool loaded = false;
  while (std::getline(maps, line)) {
    if (line.find(".so") == std::string::npos) continue;
    if (line.find("gpuslice") != std::string::npos) loaded = true;
  }
  std::printf("before-cuda libgpuslice mapped=%d\n", loaded);
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  std::printf("libcuda already loaded=%d\n", cuda != nullptr);
  size_t free_b = 0, total_b = 0;
  cudaError_t e = cudaMemGetInfo(&free_b, &total_b);
  std::printf("cudaMemGetInfo=%s total=%zu free=%zu\n", cudaGetErrorName(e), total_b, free_b);
  // Which cuMemGetInfo does the runtime's entry point table hold?
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  cudaGetDriverEntryPoint("cuMemGetInfo", &fn, cudaEnableDefault, &q);
  Dl_info info{};
  if (fn != nullptr && dladdr(fn, &info) != 0)
    std::printf("runtime entry cuMemGetInfo -> %s (%s)\n", info.dli_fname ? info.dli_fname : "?",
                info.dli_sname ? info.dli_sname : "?");
  void* ds = dlsym(RTLD_DEFAULT, "cuMemGetInfo_v2");
  if (ds != nullptr && dladdr(ds, &info) != 0) std::printf("dlsym default cuMemGetInfo_v2 -> %s\n", info.dli_fname);
  std::ifstream maps2("/proc/self/maps");
  loaded = false;
  while (std::getline(maps2, line)) {
    if (line.find(".so") == std::string::npos) continue;
    if (line.find("gpuslice") != std::string::npos || line.find("njection") != std::string::npos ||
        line.find("nterceptor") != std::string::npos || line.find("cupti") != std::string::npos ||
        line.find("libcuda.so") != std::string::npos || line.find("sanitizer") != std::string::npos ||
        line.find("Sanitizer") != std::string::npos) {
      auto pos = line.find('/');
      if (pos != std::string::npos && line.find("r-xp") != std::string::npos)
        std::printf("mapped %s\n", line.c_str() + pos);
    }
    if (line.find("gpuslice") != std::string::npos) loaded = true;
  }
  std::printf("after-cuda libgpuslice mapped=%d\n", loaded);
  void* p = nullptr;
  size_t want = quota + (1ULL << 30);
  cudaError_t big = cudaMalloc(&p, want);
  std::printf("cudaMalloc(quota+1GiB)=%s\n", cudaGetErrorName(big));
  if (big == cudaSuccess) cudaFree(p);
  bool ok = total_b == quota && big == cudaErrorMemoryAllocation;
  std::printf("RESULT tool_probe %s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
