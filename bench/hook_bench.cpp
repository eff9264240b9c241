// Hook-path microbenchmarks on the simulated driver. Each benchmark runs twice in the same
// process: through libgpuslice.so (the mock libcuda.so.1 reached via cuGetProcAddress_v2, as the
// CUDA runtime does, with LD_PRELOAD set by scripts/bench.sh) and straight into an identical copy
// of the mock that gpuslice does not hook (libgpuslice-mockcuda-direct.so). bench/report.py prints
// the ratios. The mock's own cost is the same in both, so the difference is gpuslice's.
#include <benchmark/benchmark.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "abi/cuda_abi.h"

namespace {

struct Api {
  decltype(&cuInit) init = nullptr;
  decltype(&cuGetProcAddress_v2) get_proc = nullptr;
  decltype(&cuDevicePrimaryCtxRetain) retain = nullptr;
  decltype(&cuCtxSetCurrent) set_current = nullptr;
  decltype(&cuLaunchKernel) launch = nullptr;
  decltype(&cuMemAlloc_v2) alloc = nullptr;
  decltype(&cuMemFree_v2) free = nullptr;
  decltype(&cuMemGetInfo_v2) mem_get_info = nullptr;
  decltype(&cuModuleLoadData) module_load = nullptr;
  decltype(&cuModuleGetFunction) get_function = nullptr;
  decltype(&cuCtxSynchronize) synchronize = nullptr;
  CUfunction kernel = nullptr;
};

Api load(const char* library) {
  Api api;
  void* h = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    std::fprintf(stderr, "cannot load %s: %s\n", library, dlerror());
    std::exit(2);
  }
  api.get_proc = reinterpret_cast<decltype(api.get_proc)>(dlsym(h, "cuGetProcAddress_v2"));
  auto get = [&](const char* name, auto& out) {
    void* p = nullptr;
    CUdriverProcAddressQueryResult status{};
    if (api.get_proc(name, &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS || p == nullptr) {
      std::fprintf(stderr, "%s: no %s\n", library, name);
      std::exit(2);
    }
    out = reinterpret_cast<std::remove_reference_t<decltype(out)>>(p);
  };
  get("cuInit", api.init);
  get("cuDevicePrimaryCtxRetain", api.retain);
  get("cuCtxSetCurrent", api.set_current);
  get("cuLaunchKernel", api.launch);
  get("cuMemAlloc", api.alloc);
  get("cuMemFree", api.free);
  get("cuMemGetInfo", api.mem_get_info);
  get("cuModuleLoadData", api.module_load);
  get("cuModuleGetFunction", api.get_function);
  get("cuCtxSynchronize", api.synchronize);
  api.init(0);
  CUcontext ctx = nullptr;
  api.retain(&ctx, 0);
  api.set_current(ctx);
  CUmodule mod = nullptr;
  static const char image[] = "bench";
  api.module_load(&mod, image);
  // A zero-length kernel: the benchmark measures the launch path, not simulated device time.
  api.get_function(&api.kernel, mod, "sleep_0us");
  return api;
}

Api& hooked() {
  static Api api = load("libcuda.so.1");
  return api;
}
Api& direct() {
  static Api api = load("libgpuslice-mockcuda-direct.so");
  return api;
}
Api& pick(const benchmark::State& state) { return state.range(0) == 0 ? direct() : hooked(); }
void label(benchmark::State& state) { state.SetLabel(state.range(0) == 0 ? "unhooked" : "hooked"); }

void BM_Launch(benchmark::State& state) {
  Api& api = pick(state);
  long n = 0;
  for (auto _ : state) {
    api.launch(api.kernel, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
    if (++n % 4096 == 0) api.synchronize();  // keep the simulated queue short
  }
  api.synchronize();
  label(state);
}
BENCHMARK(BM_Launch)->Arg(0)->Arg(1);

void BM_AllocFree(benchmark::State& state) {
  Api& api = pick(state);
  for (auto _ : state) {
    CUdeviceptr p = 0;
    api.alloc(&p, 1 << 20);
    api.free(p);
  }
  label(state);
}
BENCHMARK(BM_AllocFree)->Arg(0)->Arg(1);

void BM_MemGetInfo(benchmark::State& state) {
  Api& api = pick(state);
  for (auto _ : state) {
    size_t f = 0, t = 0;
    api.mem_get_info(&f, &t);
    benchmark::DoNotOptimize(f);
  }
  label(state);
}
BENCHMARK(BM_MemGetInfo)->Arg(0)->Arg(1);

void BM_GetProcAddress(benchmark::State& state) {
  Api& api = pick(state);
  for (auto _ : state) {
    void* p = nullptr;
    CUdriverProcAddressQueryResult status{};
    api.get_proc("cuLaunchKernel", &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    benchmark::DoNotOptimize(p);
  }
  label(state);
}
BENCHMARK(BM_GetProcAddress)->Arg(0)->Arg(1);

}  // namespace

BENCHMARK_MAIN();
