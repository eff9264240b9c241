// What the reclaim of docs/quota.md ("Guarantees and borrowing") would rely on, on the real driver:
//   vmm_host BYTES
// 1. granularity of cuMemCreate on the device and in host memory (HOST, HOST_NUMA);
// 2. whether a host-located cuMemCreate takes device memory: cuMemGetInfo's free memory and the
//    driver's per-process figure (NVML) before and after (the books' reconciliation charges that figure);
// 3. one range re-backed device -> host -> device at the same address, its contents copied through a
//    staging window: bitwise identical, and how long each move of BYTES took;
// 4. what host-backed pages cost a kernel: a streaming read-write pass over BYTES at the same address,
//    device-backed vs host-backed (time per pass, ratio).
// Prints `key=value` lines and PASS/FAIL checks; exit 1 on any FAIL. Under libgpuslice.so with a
// quota (tests/gpu/vmm_host.sh) the same program shows what the books do.
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "abi/nvml_abi.h"  // NVML's types; the library is opened at run time (no nvml.h needed)

namespace {

int g_failures = 0;

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    cuGetErrorName(r, &name);
    std::printf("FAIL %s: %s\n", what, name ? name : "?");
    std::fflush(stdout);
    std::exit(1);
  }
}

void expect(bool ok, const char* what) {
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what);
  if (!ok) ++g_failures;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::size_t free_memory() {
  size_t free_b = 0, total_b = 0;
  check(cuMemGetInfo(&free_b, &total_b), "cuMemGetInfo");
  return free_b;
}

struct Nvml {
  decltype(&nvmlInit_v2) init = nullptr;
  decltype(&nvmlDeviceGetHandleByIndex_v2) handle = nullptr;
  decltype(&nvmlDeviceGetComputeRunningProcesses_v3) processes = nullptr;
} g_nvml;

void open_nvml() {
  void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (h == nullptr) return;
  g_nvml.init = reinterpret_cast<decltype(g_nvml.init)>(dlsym(h, "nvmlInit_v2"));
  g_nvml.handle = reinterpret_cast<decltype(g_nvml.handle)>(dlsym(h, "nvmlDeviceGetHandleByIndex_v2"));
  g_nvml.processes =
      reinterpret_cast<decltype(g_nvml.processes)>(dlsym(h, "nvmlDeviceGetComputeRunningProcesses_v3"));
  if (g_nvml.init == nullptr || g_nvml.handle == nullptr || g_nvml.processes == nullptr ||
      g_nvml.init() != NVML_SUCCESS)
    g_nvml = {};
}

// The driver's figure for this process on device 0 (NVML), 0 if it does not list us.
unsigned long long driver_figure() {
  if (g_nvml.processes == nullptr) return 0;
  nvmlDevice_t device{};
  if (g_nvml.handle(0, &device) != NVML_SUCCESS) return 0;
  unsigned int count = 64;
  nvmlProcessInfo_t infos[64];
  if (g_nvml.processes(device, &count, infos) != NVML_SUCCESS) return 0;
  for (unsigned int i = 0; i < count; ++i)
    if (infos[i].pid == static_cast<unsigned int>(getpid())) return infos[i].usedGpuMemory;
  return 0;
}

__global__ void stream_pass(std::uint64_t* data, std::size_t words) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < words; i += gridDim.x * blockDim.x)
    data[i] = data[i] * 6364136223846793005ULL + 1442695040888963407ULL;
}

double pass_ms(CUdeviceptr address, std::size_t bytes, int passes) {
  auto* data = reinterpret_cast<std::uint64_t*>(address);
  stream_pass<<<1024, 256>>>(data, bytes / 8);  // warm-up
  cudaDeviceSynchronize();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < passes; ++i) stream_pass<<<1024, 256>>>(data, bytes / 8);
  if (cudaDeviceSynchronize() != cudaSuccess) {
    std::printf("FAIL kernel on the mapping\n");
    std::exit(1);
  }
  return seconds_since(t0) * 1e3 / passes;
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (1ULL << 30);
  cudaFree(nullptr);  // the primary context, current
  open_nvml();
  CUmemAllocationProp device{};
  device.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  device.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CUmemAllocationProp host = device;
  host.location = {CU_MEM_LOCATION_TYPE_HOST, 0};
  CUmemAllocationProp numa = device;
  numa.location = {CU_MEM_LOCATION_TYPE_HOST_NUMA, 0};
  for (auto [name, prop] :
       {std::pair{"device", &device}, std::pair{"host", &host}, std::pair{"host_numa", &numa}}) {
    size_t minimum = 0, recommended = 0;
    CUresult a = cuMemGetAllocationGranularity(&minimum, prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    CUresult b = cuMemGetAllocationGranularity(&recommended, prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
    std::printf("granularity_%s=%zu recommended_%s=%zu codes=%d,%d\n", name, minimum, name, recommended, a,
                b);
  }
  CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};

  // 2. A host-located handle and the device's memory.
  const std::size_t free0 = free_memory();
  const unsigned long long figure0 = driver_figure();
  CUmemGenericAllocationHandle on_host = 0;
  CUresult created = cuMemCreate(&on_host, bytes, &host, 0);
  std::printf("host_create_code=%d\n", created);
  if (created != CUDA_SUCCESS) {
    std::printf("FAIL cuMemCreate with CU_MEM_LOCATION_TYPE_HOST\n");
    return 1;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // a few reconciliation rounds
  const std::size_t free1 = free_memory();
  const unsigned long long figure1 = driver_figure();
  std::printf("host_handle_free_drop=%lld host_handle_figure_growth=%lld\n",
              static_cast<long long>(free0) - static_cast<long long>(free1),
              static_cast<long long>(figure1) - static_cast<long long>(figure0));
  expect(static_cast<long long>(free0) - static_cast<long long>(free1) < static_cast<long long>(bytes / 2),
         "a host-located handle does not take the device's (or the quota's) memory");

  // 3. Device -> host -> device at one address.
  CUdeviceptr address = 0, staging = 0;
  check(cuMemAddressReserve(&address, bytes, 0, 0, 0), "cuMemAddressReserve");
  check(cuMemAddressReserve(&staging, bytes, 0, 0, 0), "cuMemAddressReserve");
  CUmemGenericAllocationHandle on_device = 0;
  check(cuMemCreate(&on_device, bytes, &device, 0), "cuMemCreate device");
  check(cuMemMap(address, bytes, 0, on_device, 0), "cuMemMap");
  check(cuMemSetAccess(address, bytes, &access, 1), "cuMemSetAccess");
  std::vector<unsigned char> pattern(bytes), seen(bytes);
  std::uint64_t state = 47;
  for (auto& b : pattern) {
    state = state * 6364136223846793005ULL + 1;
    b = static_cast<unsigned char>(state >> 56);
  }
  check(cuMemcpyHtoD(address, pattern.data(), bytes), "cuMemcpyHtoD");
  const double device_ms = pass_ms(address, bytes, 5);
  check(cuMemcpyHtoD(address, pattern.data(), bytes), "cuMemcpyHtoD");  // the passes changed it
  auto rebind = [&](CUmemGenericAllocationHandle from, CUmemGenericAllocationHandle to) {
    cuCtxSynchronize();
    auto t0 = std::chrono::steady_clock::now();
    check(cuMemMap(staging, bytes, 0, to, 0), "cuMemMap staging");
    check(cuMemSetAccess(staging, bytes, &access, 1), "cuMemSetAccess staging");
    check(cuMemcpyDtoD(staging, address, bytes), "cuMemcpyDtoD");
    check(cuMemUnmap(staging, bytes), "cuMemUnmap staging");
    check(cuMemUnmap(address, bytes), "cuMemUnmap");
    check(cuMemRelease(from), "cuMemRelease");
    check(cuMemMap(address, bytes, 0, to, 0), "cuMemMap");
    check(cuMemSetAccess(address, bytes, &access, 1), "cuMemSetAccess");
    cuCtxSynchronize();
    return seconds_since(t0);
  };
  const std::size_t before_move = free_memory();
  const double to_host_s = rebind(on_device, on_host);
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  std::printf("to_host_s=%.4f to_host_gbps=%.2f freed=%lld\n", to_host_s, bytes / to_host_s / 1e9,
              static_cast<long long>(free_memory()) - static_cast<long long>(before_move));
  check(cuMemcpyDtoH(seen.data(), address, bytes), "cuMemcpyDtoH");
  expect(seen == pattern, "host-backed at the same address: bitwise identical");
  const double host_ms = pass_ms(address, bytes, 2);
  check(cuMemcpyHtoD(address, pattern.data(), bytes), "cuMemcpyHtoD");
  std::printf("pass_device_ms=%.3f pass_host_ms=%.3f host_over_device=%.2f\n", device_ms, host_ms,
              host_ms / device_ms);
  CUmemGenericAllocationHandle back = 0;
  check(cuMemCreate(&back, bytes, &device, 0), "cuMemCreate back");
  const double to_device_s = rebind(on_host, back);
  std::printf("to_device_s=%.4f to_device_gbps=%.2f\n", to_device_s, bytes / to_device_s / 1e9);
  std::fill(seen.begin(), seen.end(), 0);
  check(cuMemcpyDtoH(seen.data(), address, bytes), "cuMemcpyDtoH");
  expect(seen == pattern, "back on the device at the same address: bitwise identical");

  check(cuMemUnmap(address, bytes), "cuMemUnmap");
  check(cuMemRelease(back), "cuMemRelease");
  check(cuMemAddressFree(address, bytes), "cuMemAddressFree");
  check(cuMemAddressFree(staging, bytes), "cuMemAddressFree");
  std::printf("end_free_delta=%lld\n", static_cast<long long>(free_memory()) - static_cast<long long>(free0));
  return g_failures == 0 ? 0 : 1;
}
