// A CUDA "application" for end-to-end tests. It reaches the driver the way real programs do, chosen
// by --path: linked (exported symbols), dlsym (PyTorch/Triton style) or procaddress (the CUDA
// runtime's way: dlsym cuGetProcAddress_v2 once, then everything through it). It prints key=value
// lines that the tests parse, and exits non-zero only when the driver misbehaves unexpectedly.
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "abi/cuda_abi.h"
#include "abi/nvml_abi.h"

namespace {

struct Options {
  std::string path = "procaddress";
  std::string scenario = "fill";
  int cuda_version = 13000;
  bool per_thread = false;
  int device = 0;
  std::size_t chunk = 64ULL << 20;
  std::size_t bytes = 0;
  int seconds = 0;
  int threads = 8;
  int iterations = 2000;
  int kernel_us = 20;
  int kernels = 10;         // steps: kernels launched back to back per step
  int host_us = 500;        // steps: host work (a spin) after them
  int measure_from_ms = 0;  // steps: the device-busy share is counted from here to the end
  int late_device = -1;     // hold: attach this device once `late_trigger` exists
  std::string late_trigger;
  std::string release_trigger;  // ipc-export / vmm-export: free the exported memory once it exists
  std::string ipc_handle;       // ipc-import: the exporter's handle, in hex
  std::string image;            // reservation --what image/wrapper/file: a fat binary's path
  std::string what;             // reservation: heap, stack, growth, graph, module
  std::size_t held = 0;         // reservation: allocated first, with cuMemAlloc
  std::size_t more = 1 << 20;   // reservation: allocated last, with cuMemAlloc
  int share_pid = 0;            // vmm-import: the exporter's pid and file descriptor
  int share_fd = -1;
};

struct Driver {
  decltype(&cuInit) init = nullptr;
  decltype(&cuDeviceGet) device_get = nullptr;
  decltype(&cuDevicePrimaryCtxRetain) retain = nullptr;
  decltype(&cuCtxSetCurrent) set_current = nullptr;
  decltype(&cuMemGetInfo_v2) mem_get_info = nullptr;
  decltype(&cuDeviceTotalMem_v2) total_mem = nullptr;
  decltype(&cuMemAlloc_v2) alloc = nullptr;
  decltype(&cuMemFree_v2) free = nullptr;
  decltype(&cuMemAllocPitch_v2) alloc_pitch = nullptr;
  decltype(&cuMemAllocManaged) alloc_managed = nullptr;
  decltype(&cuMemAllocAsync) alloc_async = nullptr;
  decltype(&cuMemFreeAsync) free_async = nullptr;
  decltype(&cuMemPoolCreate) pool_create = nullptr;
  decltype(&cuDeviceGetDefaultMemPool) default_pool = nullptr;
  decltype(&cuMemAllocFromPoolAsync) alloc_from_pool = nullptr;
  decltype(&cuMemCreate) mem_create = nullptr;
  decltype(&cuMemRelease) mem_release = nullptr;
  decltype(&cuArrayCreate_v2) array_create = nullptr;
  decltype(&cuArray3DCreate_v2) array3d_create = nullptr;
  decltype(&cuArrayDestroy) array_destroy = nullptr;
  decltype(&cuMipmappedArrayCreate) mipmapped_create = nullptr;
  decltype(&cuMipmappedArrayDestroy) mipmapped_destroy = nullptr;
  decltype(&cuModuleLoadData) module_load = nullptr;
  decltype(&cuLibraryLoadData) library_load = nullptr;
  decltype(&cuLibraryUnload) library_unload = nullptr;
  decltype(&cuModuleGetFunction) get_function = nullptr;
  decltype(&cuLaunchKernel) launch = nullptr;
  decltype(&cuCtxSynchronize) synchronize = nullptr;
  decltype(&cuCtxSynchronize_v2) synchronize_v2 = nullptr;  // what CUDA 13 asks for
  decltype(&cuMemcpyHtoD_v2) copy_h2d = nullptr;
  decltype(&cuMemcpyDtoH_v2) copy_d2h = nullptr;
  decltype(&cuIpcGetMemHandle) ipc_get = nullptr;
  decltype(&cuIpcOpenMemHandle_v2) ipc_open = nullptr;
  decltype(&cuIpcCloseMemHandle) ipc_close = nullptr;
  decltype(&cuMemExportToShareableHandle) export_shareable = nullptr;
  decltype(&cuMemImportFromShareableHandle) import_shareable = nullptr;
  decltype(&cuMemAddressReserve) address_reserve = nullptr;
  decltype(&cuMemAddressFree) address_free = nullptr;
  decltype(&cuMemMap) map = nullptr;
  decltype(&cuMemUnmap) unmap = nullptr;
  decltype(&cuMemSetAccess) set_access = nullptr;
  decltype(&cuCtxSetLimit) set_limit = nullptr;
  decltype(&cuGraphCreate) graph_create = nullptr;
  decltype(&cuGraphAddMemAllocNode) graph_alloc_node = nullptr;
  decltype(&cuGraphInstantiateWithFlags) graph_instantiate = nullptr;
  decltype(&cuGraphLaunch) graph_launch = nullptr;
  decltype(&cuFuncLoad) func_load = nullptr;
  decltype(&cuModuleLoadFatBinary) load_fatbinary = nullptr;
  decltype(&cuModuleLoad) load_file = nullptr;
  decltype(&cuCtxCreate_v2) ctx_create = nullptr;
  decltype(&cuCtxCreate_v4) ctx_create_v4 = nullptr;  // what "cuCtxCreate" is from CUDA 12.5 on
  decltype(&cuCtxDestroy_v2) ctx_destroy = nullptr;
  decltype(&cuGreenCtxCreate) green_create = nullptr;
  decltype(&cuGreenCtxDestroy) green_destroy =
      nullptr;  // not hooked: what the driver takes here no hook sees
};

Options g_opt;
Driver g_drv;
CUcontext g_ctx = nullptr;

[[noreturn]] void die(const char* what, int code) {
  std::printf("error=%s code=%d\n", what, code);
  std::fflush(stdout);
  std::exit(3);
}

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) die(what, r);
}

// cuCtxCreate through whichever version the path resolved.
CUresult create_context(CUcontext* ctx, CUdevice dev) {
  return g_drv.ctx_create_v4 != nullptr ? g_drv.ctx_create_v4(ctx, nullptr, 0, dev)
                                        : g_drv.ctx_create(ctx, 0, dev);
}

template <class Fn>
void resolve(Fn& out, Fn linked, const char* base, const char* versioned, void* handle) {
  void* p = nullptr;
  if (g_opt.path == "linked") {
    out = linked;  // bound by the dynamic linker, like any program linked with -lcuda
    return;
  }
  if (g_opt.path == "dlsym") {
    p = dlsym(handle, versioned);
  } else {
    static auto get_proc =
        reinterpret_cast<decltype(&cuGetProcAddress_v2)>(dlsym(handle, "cuGetProcAddress_v2"));
    if (get_proc == nullptr) die("no_cuGetProcAddress_v2", 0);
    CUdriverProcAddressQueryResult status{};
    cuuint64_t flags =
        g_opt.per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_DEFAULT;
    if (get_proc(base, &p, g_opt.cuda_version, flags, &status) != CUDA_SUCCESS) p = nullptr;
  }
  out = reinterpret_cast<Fn>(p);
}

void load_driver() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) die("dlopen_libcuda", 0);
#define R(field, base, versioned) resolve(g_drv.field, &::versioned, #base, #versioned, h)
  R(init, cuInit, cuInit);
  R(device_get, cuDeviceGet, cuDeviceGet);
  R(retain, cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain);
  R(set_current, cuCtxSetCurrent, cuCtxSetCurrent);
  R(mem_get_info, cuMemGetInfo, cuMemGetInfo_v2);
  R(total_mem, cuDeviceTotalMem, cuDeviceTotalMem_v2);
  R(alloc, cuMemAlloc, cuMemAlloc_v2);
  R(free, cuMemFree, cuMemFree_v2);
  R(alloc_pitch, cuMemAllocPitch, cuMemAllocPitch_v2);
  R(alloc_managed, cuMemAllocManaged, cuMemAllocManaged);
  R(alloc_async, cuMemAllocAsync, cuMemAllocAsync);
  R(free_async, cuMemFreeAsync, cuMemFreeAsync);
  R(pool_create, cuMemPoolCreate, cuMemPoolCreate);
  R(default_pool, cuDeviceGetDefaultMemPool, cuDeviceGetDefaultMemPool);
  R(alloc_from_pool, cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync);
  R(mem_create, cuMemCreate, cuMemCreate);
  R(mem_release, cuMemRelease, cuMemRelease);
  R(array_create, cuArrayCreate, cuArrayCreate_v2);
  R(array3d_create, cuArray3DCreate, cuArray3DCreate_v2);
  R(array_destroy, cuArrayDestroy, cuArrayDestroy);
  R(mipmapped_create, cuMipmappedArrayCreate, cuMipmappedArrayCreate);
  R(mipmapped_destroy, cuMipmappedArrayDestroy, cuMipmappedArrayDestroy);
  R(module_load, cuModuleLoadData, cuModuleLoadData);
  R(library_load, cuLibraryLoadData, cuLibraryLoadData);
  R(library_unload, cuLibraryUnload, cuLibraryUnload);
  R(get_function, cuModuleGetFunction, cuModuleGetFunction);
  R(launch, cuLaunchKernel, cuLaunchKernel);
  // From CUDA 13 on, "cuCtxSynchronize" is the _v2 that names its context (as cudaDeviceSynchronize
  // gets it); the probe then calls that one, through the same path.
  if (g_opt.path == "procaddress" && g_opt.cuda_version >= 13000) {
    R(synchronize_v2, cuCtxSynchronize, cuCtxSynchronize_v2);
  } else {
    R(synchronize, cuCtxSynchronize, cuCtxSynchronize);
  }
  R(copy_h2d, cuMemcpyHtoD, cuMemcpyHtoD_v2);
  R(copy_d2h, cuMemcpyDtoH, cuMemcpyDtoH_v2);
  R(ipc_get, cuIpcGetMemHandle, cuIpcGetMemHandle);
  R(ipc_open, cuIpcOpenMemHandle, cuIpcOpenMemHandle_v2);
  R(ipc_close, cuIpcCloseMemHandle, cuIpcCloseMemHandle);
  R(export_shareable, cuMemExportToShareableHandle, cuMemExportToShareableHandle);
  R(import_shareable, cuMemImportFromShareableHandle, cuMemImportFromShareableHandle);
  R(address_reserve, cuMemAddressReserve, cuMemAddressReserve);
  R(address_free, cuMemAddressFree, cuMemAddressFree);
  R(map, cuMemMap, cuMemMap);
  R(unmap, cuMemUnmap, cuMemUnmap);
  R(set_access, cuMemSetAccess, cuMemSetAccess);
  R(set_limit, cuCtxSetLimit, cuCtxSetLimit);
  R(graph_create, cuGraphCreate, cuGraphCreate);
  R(graph_alloc_node, cuGraphAddMemAllocNode, cuGraphAddMemAllocNode);
  R(graph_instantiate, cuGraphInstantiate, cuGraphInstantiateWithFlags);
  R(graph_launch, cuGraphLaunch, cuGraphLaunch);
  R(func_load, cuFuncLoad, cuFuncLoad);
  R(load_fatbinary, cuModuleLoadFatBinary, cuModuleLoadFatBinary);
  R(load_file, cuModuleLoad, cuModuleLoad);
  // From CUDA 12.5 on, "cuCtxCreate" through cuGetProcAddress is the _v4 that takes parameters
  // first: calling it as the _v2 would pass the device in the flags' place.
  if (g_opt.path == "procaddress" && g_opt.cuda_version >= 12050) {
    R(ctx_create_v4, cuCtxCreate, cuCtxCreate_v4);
  } else {
    R(ctx_create, cuCtxCreate, cuCtxCreate_v2);
  }
  R(ctx_destroy, cuCtxDestroy, cuCtxDestroy_v2);
  R(green_create, cuGreenCtxCreate, cuGreenCtxCreate);
  R(green_destroy, cuGreenCtxDestroy, cuGreenCtxDestroy);
#undef R
  if (g_drv.init == nullptr || g_drv.alloc == nullptr) die("resolve", 0);
}

void open_device(int ordinal) {
  CUresult r = g_drv.init(0);
  std::printf("init=%d\n", r);
  if (r != CUDA_SUCCESS) {
    std::fflush(stdout);
    std::exit(4);
  }
  CUdevice dev = 0;
  check(g_drv.device_get(&dev, ordinal), "cuDeviceGet");
  check(g_drv.retain(&g_ctx, dev), "cuDevicePrimaryCtxRetain");
  check(g_drv.set_current(g_ctx), "cuCtxSetCurrent");
}

void print_info(const char* prefix) {
  size_t free_b = 0, total_b = 0;
  check(g_drv.mem_get_info(&free_b, &total_b), "cuMemGetInfo");
  size_t dev_total = 0;
  check(g_drv.total_mem(&dev_total, g_opt.device), "cuDeviceTotalMem");
  std::printf("%sfree=%zu\n%stotal=%zu\n%sdevice_total=%zu\n", prefix, free_b, prefix, total_b, prefix,
              dev_total);
}

// Allocates chunks until the first refusal; checks a retry works after one free.
int fill() {
  print_info("");
  std::vector<CUdeviceptr> ptrs;
  CUresult refused = CUDA_SUCCESS;
  for (int i = 0; i < 100000; ++i) {
    CUdeviceptr p = 0;
    refused = g_drv.alloc(&p, g_opt.chunk);
    if (refused != CUDA_SUCCESS) break;
    ptrs.push_back(p);
  }
  std::printf("allocated=%zu\nrefused_code=%d\n", ptrs.size() * g_opt.chunk, refused);
  print_info("after_");
  if (!ptrs.empty()) {
    check(g_drv.free(ptrs.back()), "cuMemFree");
    ptrs.pop_back();
    CUdeviceptr p = 0;
    CUresult again = g_drv.alloc(&p, g_opt.chunk);
    std::printf("retry_code=%d\n", again);
    if (again == CUDA_SUCCESS) ptrs.push_back(p);
  }
  for (auto p : ptrs) check(g_drv.free(p), "cuMemFree");
  print_info("end_");
  return 0;
}

// Every allocation API of docs/quota.md, each under the quota: reports how much the virtual free
// memory dropped while the allocation was live, and whether an over-quota request was refused.
int apis() {
  size_t free0 = 0, total = 0;
  check(g_drv.mem_get_info(&free0, &total), "cuMemGetInfo");
  std::size_t n = g_opt.chunk;
  auto drop = [&]() {
    size_t f = 0, t = 0;
    check(g_drv.mem_get_info(&f, &t), "cuMemGetInfo");
    return static_cast<long long>(free0) - static_cast<long long>(f);
  };
  auto report = [&](const char* api, CUresult ok, long long dropped, CUresult over) {
    std::printf("api=%s ok=%d drop=%lld over_quota=%d\n", api, ok, dropped, over);
  };
  std::size_t too_big = total + (1ULL << 20);
  {
    CUdeviceptr p = 0, q = 0;
    CUresult ok = g_drv.alloc(&p, n);
    long long d = drop();
    report("cuMemAlloc", ok, d, g_drv.alloc(&q, too_big));
    g_drv.free(p);
  }
  {
    CUdeviceptr p = 0, q = 0;
    size_t pitch = 0;
    CUresult ok = g_drv.alloc_pitch(&p, &pitch, n / 1024, 1024, 4);
    long long d = drop();
    report("cuMemAllocPitch", ok, d, g_drv.alloc_pitch(&q, &pitch, too_big / 1024, 1024, 4));
    g_drv.free(p);
  }
  {
    CUdeviceptr p = 0, q = 0;
    CUresult ok = g_drv.alloc_managed(&p, n, 1);
    long long d = drop();
    report("cuMemAllocManaged", ok, d, g_drv.alloc_managed(&q, too_big, 1));
    g_drv.free(p);
  }
  {
    CUdeviceptr p = 0, q = 0;
    CUresult ok = g_drv.alloc_async(&p, n, nullptr);
    long long d = drop();
    report("cuMemAllocAsync", ok, d, g_drv.alloc_async(&q, too_big, nullptr));
    g_drv.free_async(p, nullptr);
  }
  {
    CUmemoryPool pool = nullptr;
    check(g_drv.default_pool(&pool, g_opt.device), "cuDeviceGetDefaultMemPool");
    CUdeviceptr p = 0, q = 0;
    CUresult ok = g_drv.alloc_from_pool(&p, n, pool, nullptr);
    long long d = drop();
    report("cuMemAllocFromPoolAsync", ok, d, g_drv.alloc_from_pool(&q, too_big, pool, nullptr));
    g_drv.free_async(p, nullptr);
  }
  {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = g_opt.device;
    CUmemGenericAllocationHandle h = 0, h2 = 0;
    CUresult ok = g_drv.mem_create(&h, n, &prop, 0);
    long long d = drop();
    report("cuMemCreate", ok, d, g_drv.mem_create(&h2, too_big, &prop, 0));
    g_drv.mem_release(h);
  }
  {
    CUDA_ARRAY_DESCRIPTOR desc{};
    desc.Width = 4096;
    desc.Height = n / (4096 * 4);
    desc.Format = CU_AD_FORMAT_FLOAT;
    desc.NumChannels = 1;
    CUarray a = nullptr, b = nullptr;
    CUresult ok = g_drv.array_create(&a, &desc);
    long long d = drop();
    CUDA_ARRAY_DESCRIPTOR big = desc;
    big.Height = too_big / (4096 * 4) + 1;
    report("cuArrayCreate", ok, d, g_drv.array_create(&b, &big));
    g_drv.array_destroy(a);
  }
  {
    CUDA_ARRAY3D_DESCRIPTOR desc{};
    desc.Width = 1024;
    desc.Height = 1024;
    desc.Depth = n / (1024 * 1024 * 4);
    desc.Format = CU_AD_FORMAT_UNSIGNED_INT8;
    desc.NumChannels = 4;
    CUarray a = nullptr, b = nullptr;
    CUresult ok = g_drv.array3d_create(&a, &desc);
    long long d = drop();
    CUDA_ARRAY3D_DESCRIPTOR big = desc;
    big.Depth = too_big / (1024 * 1024 * 4) + 1;
    report("cuArray3DCreate", ok, d, g_drv.array3d_create(&b, &big));
    g_drv.array_destroy(a);
  }
  {
    CUDA_ARRAY3D_DESCRIPTOR desc{};
    desc.Width = 4096;
    desc.Height = n / (4096 * 4);
    desc.Format = CU_AD_FORMAT_FLOAT;
    desc.NumChannels = 1;
    CUmipmappedArray a = nullptr, b = nullptr;
    CUresult ok = g_drv.mipmapped_create(&a, &desc, 1);
    long long d = drop();
    CUDA_ARRAY3D_DESCRIPTOR big = desc;
    big.Height = too_big / (4096 * 4) + 1;
    report("cuMipmappedArrayCreate", ok, d, g_drv.mipmapped_create(&b, &big, 1));
    g_drv.mipmapped_destroy(a);
  }
  print_info("end_");
  return 0;
}

// Allocates --bytes, reports, then waits (for multi-process and crash tests) until killed or
// --seconds pass; frees before a normal exit.
int hold() {
  CUdeviceptr p = 0;
  CUresult r = g_drv.alloc(&p, g_opt.bytes);
  std::printf("hold_code=%d\n", r);
  print_info("");
  std::fflush(stdout);
  bool late_done = false;
  for (int i = 0; i < g_opt.seconds * 20; ++i) {
    usleep(50000);
    if (!late_done && g_opt.late_device >= 0 && access(g_opt.late_trigger.c_str(), F_OK) == 0) {
      // First use of another device, long after start: its quota is what applies now.
      std::size_t total = 0;
      CUresult lr = g_drv.total_mem(&total, g_opt.late_device);
      std::printf("late_code=%d\nlate_total=%zu\n", lr, total);
      late_done = true;
    }
    if (i % 2 == 0) {
      print_info("live_");
      std::fflush(stdout);
    }
  }
  if (r == CUDA_SUCCESS) g_drv.free(p);
  return 0;
}

// Threads allocating and freeing random sizes at once; everything is freed at the end.
int threads() {
  std::atomic<int> refusals{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < g_opt.threads; ++t) {
    pool.emplace_back([&, t] {
      g_drv.set_current(g_ctx);  // contexts are current per thread
      std::mt19937_64 rng(static_cast<unsigned>(t) * 7919U + 1U);
      std::vector<CUdeviceptr> live;
      for (int i = 0; i < g_opt.iterations; ++i) {
        if (live.empty() || rng() % 2 == 0) {
          CUdeviceptr p = 0;
          CUresult r = g_drv.alloc(&p, (rng() % 64 + 1) << 18);
          if (r == CUDA_SUCCESS) {
            live.push_back(p);
          } else if (r == CUDA_ERROR_OUT_OF_MEMORY) {
            refusals.fetch_add(1);
          } else {
            failures.fetch_add(1);
          }
        } else {
          std::size_t k = rng() % live.size();
          if (g_drv.free(live[k]) != CUDA_SUCCESS) failures.fetch_add(1);
          live[k] = live.back();
          live.pop_back();
        }
      }
      for (auto p : live)
        if (g_drv.free(p) != CUDA_SUCCESS) failures.fetch_add(1);
    });
  }
  for (auto& th : pool) th.join();
  std::printf("refusals=%d\nfailures=%d\n", refusals.load(), failures.load());
  print_info("end_");
  return failures.load() == 0 ? 0 : 5;
}

// A forked child allocates on its own; the parent's allocation stays its own.
int forked() {
  CUdeviceptr p = 0;
  check(g_drv.alloc(&p, g_opt.bytes), "cuMemAlloc parent");
  pid_t child = fork();
  if (child == 0) {
    // CUDA contexts do not survive fork; a child that uses CUDA starts its own (as real programs
    // must), and must not be charged for the parent's memory.
    open_device(g_opt.device);
    size_t f = 0, t = 0;
    g_drv.mem_get_info(&f, &t);
    CUdeviceptr q = 0;
    CUresult r = g_drv.alloc(&q, g_opt.bytes);
    std::printf("child_alloc=%d\nchild_free=%zu\n", r, f);
    std::fflush(stdout);
    _exit(r == CUDA_SUCCESS ? 0 : 6);
  }
  int status = 0;
  waitpid(child, &status, 0);
  std::printf("child_status=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  print_info("parent_");
  g_drv.free(p);
  return 0;
}

// Launches --iterations kernels of the mock's "sleep_<N>us" kind and copies both ways.
int launches() {
  static const char image[] = "mock-module";
  CUmodule mod = nullptr;
  check(g_drv.module_load(&mod, image), "cuModuleLoadData");
  CUfunction fn = nullptr;
  std::string name = "sleep_" + std::to_string(g_opt.kernel_us) + "us";
  check(g_drv.get_function(&fn, mod, name.c_str()), "cuModuleGetFunction");
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < g_opt.iterations; ++i)
    check(g_drv.launch(fn, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr), "cuLaunchKernel");
  check(g_drv.synchronize_v2 != nullptr ? g_drv.synchronize_v2(nullptr) : g_drv.synchronize(),
        "cuCtxSynchronize");
  auto wall = std::chrono::steady_clock::now() - t0;
  std::printf("launch_wall_ns=%lld\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(wall).count()));
  CUdeviceptr d = 0;
  check(g_drv.alloc(&d, 4096), "cuMemAlloc");
  char host[4096] = {1};
  check(g_drv.copy_h2d(d, host, sizeof host), "cuMemcpyHtoD");
  check(g_drv.copy_d2h(host, d, sizeof host), "cuMemcpyDtoH");
  check(g_drv.free(d), "cuMemFree");
  std::printf("launched=%d\n", g_opt.iterations);
  return 0;
}

// The driver's own figure for this process (NVML's per-process usedGpuMemory), 0 if not listed.
unsigned long long own_driver_figure() {
  static void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) die("dlopen_nvml", 0);
  static auto init = reinterpret_cast<decltype(&nvmlInit_v2)>(dlsym(h, "nvmlInit_v2"));
  static auto by_index =
      reinterpret_cast<decltype(&nvmlDeviceGetHandleByIndex_v2)>(dlsym(h, "nvmlDeviceGetHandleByIndex_v2"));
  static auto list = reinterpret_cast<decltype(&nvmlDeviceGetComputeRunningProcesses_v3)>(
      dlsym(h, "nvmlDeviceGetComputeRunningProcesses_v3"));
  static bool ready = init != nullptr && init() == NVML_SUCCESS;
  if (!ready || by_index == nullptr || list == nullptr) die("nvml", 0);
  nvmlDevice_t dev = nullptr;
  if (by_index(static_cast<unsigned>(g_opt.device), &dev) != NVML_SUCCESS) die("nvml_handle", 0);
  nvmlProcessInfo_t infos[64];
  unsigned count = 64;
  if (list(dev, &count, infos) != NVML_SUCCESS) die("nvml_processes", 0);
  for (unsigned i = 0; i < count && i < 64; ++i)
    if (infos[i].pid == static_cast<unsigned>(getpid())) return infos[i].usedGpuMemory;
  return 0;
}

// Each way the driver takes memory for itself (--what: heap, stack, growth, module, unseen, graph), after
// holding --held bytes of cuMemAlloc: prints each call's code, the driver's own figure for this process and
// the books' free memory, then (after the reconciliation had time) whether a further --more bytes (1 MiB)
// are still granted.
int reservation() {
  CUdeviceptr held = 0;
  if (g_opt.held != 0) check(g_drv.alloc(&held, g_opt.held), "cuMemAlloc");
  const std::size_t n = g_opt.bytes;
  if (g_opt.what == "heap" || g_opt.what == "stack") {
    const CUlimit limit = g_opt.what == "heap" ? CU_LIMIT_MALLOC_HEAP_SIZE : CU_LIMIT_STACK_SIZE;
    std::printf("set_code=%d\n", g_drv.set_limit(limit, n));
  } else if (g_opt.what == "growth" || g_opt.what == "module") {
    // "globals=" / "lazy=": what the simulated driver's image takes at load and at first launch.
    std::string image = "mock-module globals=" + std::to_string(g_opt.what == "module" ? n : 0) +
                        " lazy=" + std::to_string(g_opt.what == "module" ? g_opt.chunk : 0);
    CUmodule mod = nullptr;
    CUresult loaded = g_drv.module_load(&mod, image.c_str());
    std::printf("load_code=%d\n", loaded);
    if (loaded == CUDA_SUCCESS) {
      CUfunction fn = nullptr;
      std::string name = g_opt.what == "growth" ? "local_" + std::to_string(n) : std::string("kernel");
      check(g_drv.get_function(&fn, mod, name.c_str()), "cuModuleGetFunction");
      std::printf("launch_code=%d\n", g_drv.launch(fn, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr));
    }
  } else if (g_opt.what == "ptx") {
    // PTX declaring --bytes of globals (the simulated driver takes them at load: "globals=").
    std::string image = ".version 8.0\n.target sm_90\n.address_size 64\n.global .align 8 .b8 big[" +
                        std::to_string(n) + "];\n// globals=" + std::to_string(n) + "\n";
    CUmodule mod = nullptr;
    std::printf("load_code=%d\n", g_drv.module_load(&mod, image.c_str()));
  } else if (g_opt.what == "image" || g_opt.what == "wrapper" || g_opt.what == "file") {
    // A real fat binary (--image): as data, through the runtime's wrapper, or as a file.
    std::ifstream in(g_opt.image, std::ios::binary);
    std::vector<char> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (bytes.empty()) die("image", 0);
    struct {
      unsigned magic = 0x466243b1;
      unsigned version = 1;
      const void* data = nullptr;
      void* unused = nullptr;
    } wrapper;
    wrapper.data = bytes.data();
    CUmodule mod = nullptr;
    const CUresult loaded = g_opt.what == "file"      ? g_drv.load_file(&mod, g_opt.image.c_str())
                            : g_opt.what == "wrapper" ? g_drv.load_fatbinary(&mod, &wrapper)
                                                      : g_drv.module_load(&mod, bytes.data());
    std::printf("load_code=%d\n", loaded);
    print_info("loaded_");
    if (loaded == CUDA_SUCCESS) {
      CUfunction fn = nullptr;
      check(g_drv.get_function(&fn, mod, "_Z1ky"), "cuModuleGetFunction");
      std::printf("launch_code=%d\n", g_drv.launch(fn, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr));
    }
  } else if (g_opt.what == "unseen") {
    // A function's code (--bytes) loaded through a call no hook sees.
    std::string image = "mock-module lazy=" + std::to_string(n);
    CUmodule mod = nullptr;
    check(g_drv.module_load(&mod, image.c_str()), "cuModuleLoadData");
    CUfunction fn = nullptr;
    check(g_drv.get_function(&fn, mod, "kernel"), "cuModuleGetFunction");
    std::printf("load_code=%d\n", g_drv.func_load(fn));
  } else if (g_opt.what == "graph") {
    CUgraph graph = nullptr;
    check(g_drv.graph_create(&graph, 0), "cuGraphCreate");
    CUDA_MEM_ALLOC_NODE_PARAMS params{};
    int location[2] = {CU_MEM_LOCATION_TYPE_DEVICE, g_opt.device};
    std::memcpy(params.poolProps + 8, location, sizeof location);
    params.poolProps[0] = CU_MEM_ALLOCATION_TYPE_PINNED;
    params.bytesize = n;
    CUgraphNode node = nullptr;
    CUresult added = g_drv.graph_alloc_node(&node, graph, nullptr, 0, &params);
    std::printf("node_code=%d\n", added);
    if (added == CUDA_SUCCESS) {
      CUgraphExec exec = nullptr;
      check(g_drv.graph_instantiate(&exec, graph, 0), "cuGraphInstantiate");
      std::printf("launch_code=%d\n", g_drv.graph_launch(exec, nullptr));
    }
  } else {
    die("unknown_what", 0);
  }
  std::printf("driver_used=%llu\n", own_driver_figure());
  print_info("");
  usleep(300000);  // three reconciliation intervals
  std::printf("later_driver_used=%llu\n", own_driver_figure());
  print_info("later_");
  CUdeviceptr more = 0;
  std::printf("more_code=%d\n", g_drv.alloc(&more, g_opt.more));
  return 0;
}

// Up to --iterations contexts (--what created: cuCtxCreate, each made current with one launch;
// green: cuGreenCtxCreate), until the first refusal; the driver's figure for the process is looked
// at after each. Then all are destroyed and one more is created.
int contexts() {
  CUdevice dev = 0;
  check(g_drv.device_get(&dev, g_opt.device), "cuDeviceGet");
  if (g_opt.what == "primary") {
    // The primary context of the next device, whose footprint nothing measured there yet.
    CUdevice other = 0;
    check(g_drv.device_get(&other, g_opt.device + 1), "cuDeviceGet");
    CUcontext ctx = nullptr;
    std::printf("retain_code=%d\n", g_drv.retain(&ctx, other));
    return 0;
  }
  const bool green = g_opt.what == "green";
  std::vector<void*> made;
  CUresult refused = CUDA_SUCCESS;
  unsigned long long peak = own_driver_figure();
  for (int i = 0; i < g_opt.iterations; ++i) {
    void* handle = nullptr;
    if (green) {
      refused = g_drv.green_create(reinterpret_cast<CUgreenCtx*>(&handle), nullptr, dev, 0);
    } else {
      refused = create_context(reinterpret_cast<CUcontext*>(&handle), dev);
    }
    if (refused != CUDA_SUCCESS) break;
    made.push_back(handle);
    if (!green) {
      check(g_drv.set_current(static_cast<CUcontext>(handle)), "cuCtxSetCurrent");
      static const char image[] = "mock-module";
      CUmodule mod = nullptr;
      check(g_drv.module_load(&mod, image), "cuModuleLoadData");
      CUfunction fn = nullptr;
      check(g_drv.get_function(&fn, mod, "kernel"), "cuModuleGetFunction");
      check(g_drv.launch(fn, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr), "cuLaunchKernel");
    }
    const unsigned long long now = own_driver_figure();
    if (now > peak) peak = now;
  }
  std::printf("created=%zu\nrefused_code=%d\npeak_driver_used=%llu\n", made.size(), refused, peak);
  for (void* handle : made) {
    const CUresult r = green ? g_drv.green_destroy(static_cast<CUgreenCtx>(handle))
                             : g_drv.ctx_destroy(static_cast<CUcontext>(handle));
    check(r, "cuCtxDestroy");
  }
  check(g_drv.set_current(g_ctx), "cuCtxSetCurrent");
  std::printf("destroyed_driver_used=%llu\n", own_driver_figure());
  print_info("destroyed_");
  CUcontext again = nullptr;
  const CUresult again_code = create_context(&again, dev);
  std::printf("again_code=%d\n", again_code);
  if (again_code == CUDA_SUCCESS) check(g_drv.ctx_destroy(again), "cuCtxDestroy");
  return 0;
}

// The CUDA 12+ runtime's order: cuInit, the program's fat binary (--image) loaded as a library while
// no context exists, then a context (--what primary or created) and a launch in it; or (--what
// existing) the primary context retained first but not current at the load. The driver loads
// the library's globals into the context at its creation (EAGER) or first launch (lazy).
int library_first() {
  std::printf("init=%d\n", g_drv.init(0));
  CUdevice dev = 0;
  check(g_drv.device_get(&dev, g_opt.device), "cuDeviceGet");
  std::ifstream in(g_opt.image, std::ios::binary);
  std::vector<char> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (bytes.empty()) die("image", 0);
  // --what existing: the primary context exists (not current) when the library is loaded.
  const bool existing = g_opt.what == "existing";
  CUcontext ctx = nullptr;
  CUresult made = existing ? g_drv.retain(&ctx, dev) : CUDA_ERROR_UNKNOWN;
  CUlibrary lib = nullptr;
  const CUresult loaded = g_drv.library_load(&lib, bytes.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
  std::printf("library_code=%d\n", loaded);
  if (!existing) made = g_opt.what == "created" ? create_context(&ctx, dev) : g_drv.retain(&ctx, dev);
  std::printf("context_code=%d\n", made);
  unsigned long long peak = own_driver_figure();
  if (made == CUDA_SUCCESS) {
    check(g_drv.set_current(ctx), "cuCtxSetCurrent");
    static const char image[] = "mock-module";
    CUmodule mod = nullptr;
    check(g_drv.module_load(&mod, image), "cuModuleLoadData");
    CUfunction fn = nullptr;
    check(g_drv.get_function(&fn, mod, "kernel"), "cuModuleGetFunction");
    std::printf("launch_code=%d\n", g_drv.launch(fn, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr));
    peak = std::max(peak, own_driver_figure());
  }
  std::printf("peak_driver_used=%llu\n", peak);
  if (made == CUDA_SUCCESS) {
    usleep(300000);  // three reconciliation intervals
    print_info("later_");
  }
  if (loaded == CUDA_SUCCESS) std::printf("unload_code=%d\n", g_drv.library_unload(lib));
  if (made == CUDA_SUCCESS) {
    usleep(300000);
    print_info("unloaded_");
  }
  return 0;
}

// A step loop, the shape of batch-1 decoding: --kernels kernels of --kernel-us launched back to back,
// then --host-us of host work (a spin, so the host time is exact), for --seconds. Prints the steps
// done and the share of [--measure-from-ms, end) the launched kernels occupy the device (what was
// launched in that span, waited for at the end), which is the GPU time a device-bound loop gets.
int steps() {
  static const char image[] = "mock-module";
  CUmodule mod = nullptr;
  check(g_drv.module_load(&mod, image), "cuModuleLoadData");
  CUfunction fn = nullptr;
  std::string name = "sleep_" + std::to_string(g_opt.kernel_us) + "us";
  check(g_drv.get_function(&fn, mod, name.c_str()), "cuModuleGetFunction");
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const auto end = t0 + std::chrono::seconds(g_opt.seconds);
  const auto measure_from = t0 + std::chrono::milliseconds(g_opt.measure_from_ms);
  long long steps = 0;
  long long measured_kernels = 0;
  Clock::time_point measured_start{};
  while (Clock::now() < end) {
    const auto now = Clock::now();
    if (now >= measure_from && measured_start == Clock::time_point{}) measured_start = now;
    for (int i = 0; i < g_opt.kernels; ++i)
      check(g_drv.launch(fn, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr), "cuLaunchKernel");
    if (measured_start != Clock::time_point{}) measured_kernels += g_opt.kernels;
    const auto host_end = Clock::now() + std::chrono::microseconds(g_opt.host_us);
    while (Clock::now() < host_end) {
    }
    ++steps;
  }
  check(g_drv.synchronize_v2 != nullptr ? g_drv.synchronize_v2(nullptr) : g_drv.synchronize(),
        "cuCtxSynchronize");
  const double span_us = std::chrono::duration<double, std::micro>(Clock::now() - measured_start).count();
  std::printf("steps=%lld\n", steps);
  std::printf("busy_permille=%lld\n", static_cast<long long>(1000.0 * static_cast<double>(measured_kernels) *
                                                             g_opt.kernel_us / span_us));
  return 0;
}

// NVML as nvidia-smi uses it: dlopen + dlsym, memory info of every device.
int nvml() {
  void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) die("dlopen_nvml", 0);
  auto init = reinterpret_cast<decltype(&nvmlInit_v2)>(dlsym(h, "nvmlInit_v2"));
  auto count_fn = reinterpret_cast<decltype(&nvmlDeviceGetCount_v2)>(dlsym(h, "nvmlDeviceGetCount_v2"));
  auto by_index =
      reinterpret_cast<decltype(&nvmlDeviceGetHandleByIndex_v2)>(dlsym(h, "nvmlDeviceGetHandleByIndex_v2"));
  auto info = reinterpret_cast<decltype(&nvmlDeviceGetMemoryInfo)>(dlsym(h, "nvmlDeviceGetMemoryInfo"));
  auto info2 =
      reinterpret_cast<decltype(&nvmlDeviceGetMemoryInfo_v2)>(dlsym(h, "nvmlDeviceGetMemoryInfo_v2"));
  nvmlReturn_t r = init();
  std::printf("nvml_init=%d\n", r);
  if (r != NVML_SUCCESS) return 0;
  unsigned count = 0;
  count_fn(&count);
  for (unsigned i = 0; i < count; ++i) {
    nvmlDevice_t dev = nullptr;
    by_index(i, &dev);
    nvmlMemory_t m{};
    nvmlMemory_v2_t m2{};
    m2.version = GPUSLICE_NVML_MEMORY_V2;
    info(dev, &m);
    info2(dev, &m2);
    std::printf(
        "nvml%u_total=%llu\nnvml%u_used=%llu\nnvml%u_free=%llu\nnvml%u_v2_total=%llu\nnvml%u_v2_used=%llu\n",
        i, m.total, i, m.used, i, m.free, i, m2.total, i, m2.used);
  }
  return 0;
}

// Sharing memory between processes: an exporter holds memory and hands out a handle (printed);
// an importer opens it and reports its own books before, while and after it holds it.
void hold_until_released(const char* what, const std::function<CUresult()>& release) {
  bool released = false;
  for (int i = 0; i < g_opt.seconds * 20; ++i) {
    usleep(50000);
    if (!released && !g_opt.release_trigger.empty() && access(g_opt.release_trigger.c_str(), F_OK) == 0) {
      std::printf("%s=%d\n", what, release());
      released = true;
    }
    if (i % 2 == 0) print_info("live_");
    std::fflush(stdout);
  }
}

int ipc_export() {
  CUdeviceptr p = 0;
  check(g_drv.alloc(&p, g_opt.bytes), "cuMemAlloc");
  CUipcMemHandle handle{};
  check(g_drv.ipc_get(&handle, p), "cuIpcGetMemHandle");
  std::string hex;
  for (char c : handle.reserved) {
    char two[3];
    std::snprintf(two, sizeof two, "%02x", static_cast<unsigned char>(c));
    hex += two;
  }
  std::printf("ipc_handle=%s\n", hex.c_str());
  print_info("");
  std::fflush(stdout);
  hold_until_released("freed_code", [&] { return g_drv.free(p); });
  return 0;
}

int ipc_import() {
  CUipcMemHandle handle{};
  if (g_opt.ipc_handle.size() != 2 * sizeof handle.reserved) die("ipc_handle_length", 0);
  for (std::size_t i = 0; i < sizeof handle.reserved; ++i)
    handle.reserved[i] = static_cast<char>(std::stoi(g_opt.ipc_handle.substr(2 * i, 2), nullptr, 16));
  print_info("before_");
  CUdeviceptr p = 0;
  CUresult r = g_drv.ipc_open(&p, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  std::printf("open_code=%d\n", r);
  if (r != CUDA_SUCCESS) return 0;
  const char text[] = "written by the importer";
  char back[sizeof text] = {};
  std::printf("write_code=%d\n", g_drv.copy_h2d(p, text, sizeof text));
  std::printf("read_code=%d\n", g_drv.copy_d2h(back, p, sizeof back));
  std::printf("read_back=%d\n", std::memcmp(text, back, sizeof text) == 0 ? 1 : 0);
  usleep(700000);  // past a footprint reconciliation (every 500 ms), which must not charge it either
  print_info("opened_");
  std::printf("close_code=%d\n", g_drv.ipc_close(p));
  print_info("closed_");
  return 0;
}

CUmemAllocationProp device_prop() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = g_opt.device;
  return prop;
}

int vmm_export() {
  CUmemAllocationProp prop = device_prop();
  CUmemGenericAllocationHandle handle = 0;
  check(g_drv.mem_create(&handle, g_opt.bytes, &prop, 0), "cuMemCreate");
  int fd = -1;
  check(g_drv.export_shareable(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
        "cuMemExportToShareableHandle");
  std::printf("share_fd=%d\n", fd);
  print_info("");
  std::fflush(stdout);
  hold_until_released("freed_code", [&] { return g_drv.mem_release(handle); });
  return 0;
}

int vmm_import() {
  std::string path = "/proc/" + std::to_string(g_opt.share_pid) + "/fd/" + std::to_string(g_opt.share_fd);
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) die("open_shared_fd", errno);
  print_info("before_");
  CUmemGenericAllocationHandle handle = 0;
  CUresult r = g_drv.import_shareable(&handle, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)),
                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  std::printf("import_code=%d\n", r);
  close(fd);
  if (r != CUDA_SUCCESS) return 0;
  print_info("imported_");
  CUdeviceptr va = 0;
  check(g_drv.address_reserve(&va, g_opt.bytes, 0, 0, 0), "cuMemAddressReserve");
  std::printf("map_code=%d\n", g_drv.map(va, g_opt.bytes, 0, handle, 0));
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = g_opt.device;
  access.flags = 3;  // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
  std::printf("access_code=%d\n", g_drv.set_access(va, g_opt.bytes, &access, 1));
  print_info("mapped_");
  std::printf("unmap_code=%d\n", g_drv.unmap(va, g_opt.bytes));
  std::printf("release_code=%d\n", g_drv.mem_release(handle));
  check(g_drv.address_free(va, g_opt.bytes), "cuMemAddressFree");
  print_info("released_");
  return 0;
}

// VMM as a reclaim would use it (docs/quota.md, "Guarantees and borrowing"): `bytes` of device memory
// mapped at one address, then a device handle over what is left of the quota, then the range re-backed
// by host memory and by device memory again at the same address, its contents copied each time.
// Prints the virtual free memory after each step and whether the data survived bitwise.
int vmm_move() {
  const std::size_t n = g_opt.bytes;
  CUmemAllocationProp device = device_prop();
  device.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  CUmemAllocationProp host = device;
  host.location.type = CU_MEM_LOCATION_TYPE_HOST;
  host.location.id = 0;
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = g_opt.device;
  access.flags = 3;  // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
  print_info("start_");

  CUdeviceptr address = 0;
  CUdeviceptr staging = 0;
  check(g_drv.address_reserve(&address, n, 0, 0, 0), "cuMemAddressReserve");
  check(g_drv.address_reserve(&staging, n, 0, 0, 0), "cuMemAddressReserve");
  std::printf("reserved=1\n");
  print_info("reserved_");
  CUmemGenericAllocationHandle on_device = 0;
  check(g_drv.mem_create(&on_device, n, &device, 0), "cuMemCreate");
  print_info("created_");
  check(g_drv.map(address, n, 0, on_device, 0), "cuMemMap");
  check(g_drv.set_access(address, n, &access, 1), "cuMemSetAccess");
  print_info("mapped_");
  std::vector<unsigned char> pattern(n);
  std::uint32_t state = 47;
  for (auto& b : pattern) {
    state = state * 1664525u + 1013904223u;
    b = static_cast<unsigned char>(state >> 24);
  }
  check(g_drv.copy_h2d(address, pattern.data(), n), "cuMemcpyHtoD");

  // What is left of the quota, plus one granule: refused.
  size_t free_now = 0, total = 0;
  check(g_drv.mem_get_info(&free_now, &total), "cuMemGetInfo");
  const std::size_t granule = 2u << 20;
  CUmemGenericAllocationHandle over = 0;
  std::printf("over_code=%d\n", g_drv.mem_create(&over, (free_now / granule + 1) * granule, &device, 0));

  CUmemGenericAllocationHandle on_host = 0;
  std::printf("host_create_code=%d\n", g_drv.mem_create(&on_host, n, &host, 0));
  print_info("host_created_");
  std::vector<unsigned char> seen(n);
  // Re-backs `address` by `to`: its contents copied through the staging window, `from` released.
  auto rebind = [&](CUmemGenericAllocationHandle from, CUmemGenericAllocationHandle to) {
    check(g_drv.copy_d2h(seen.data(), address, n), "cuMemcpyDtoH");
    check(g_drv.map(staging, n, 0, to, 0), "cuMemMap");
    check(g_drv.set_access(staging, n, &access, 1), "cuMemSetAccess");
    check(g_drv.copy_h2d(staging, seen.data(), n), "cuMemcpyHtoD");
    check(g_drv.unmap(staging, n), "cuMemUnmap");
    check(g_drv.unmap(address, n), "cuMemUnmap");
    check(g_drv.mem_release(from), "cuMemRelease");
    check(g_drv.map(address, n, 0, to, 0), "cuMemMap");
    check(g_drv.set_access(address, n, &access, 1), "cuMemSetAccess");
    std::fill(seen.begin(), seen.end(), 0);
    check(g_drv.copy_d2h(seen.data(), address, n), "cuMemcpyDtoH");
    return seen == pattern ? 1 : 0;
  };
  std::printf("host_identical=%d\n", rebind(on_device, on_host));
  print_info("on_host_");
  CUmemGenericAllocationHandle back = 0;
  std::printf("back_create_code=%d\n", g_drv.mem_create(&back, n, &device, 0));
  print_info("back_created_");
  std::printf("device_identical=%d\n", rebind(on_host, back));
  print_info("back_");
  check(g_drv.unmap(address, n), "cuMemUnmap");
  check(g_drv.mem_release(back), "cuMemRelease");
  check(g_drv.address_free(address, n), "cuMemAddressFree");
  check(g_drv.address_free(staging, n), "cuMemAddressFree");
  print_info("end_");
  return 0;
}

std::size_t parse_bytes(const char* s) { return static_cast<std::size_t>(std::strtoull(s, nullptr, 10)); }

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--path")
      g_opt.path = next();
    else if (a == "--what")
      g_opt.what = next();
    else if (a == "--held")
      g_opt.held = parse_bytes(next());
    else if (a == "--more")
      g_opt.more = parse_bytes(next());
    else if (a == "--scenario")
      g_opt.scenario = next();
    else if (a == "--cuda-version")
      g_opt.cuda_version = std::atoi(next());
    else if (a == "--per-thread")
      g_opt.per_thread = true;
    else if (a == "--device")
      g_opt.device = std::atoi(next());
    else if (a == "--chunk")
      g_opt.chunk = parse_bytes(next());
    else if (a == "--bytes")
      g_opt.bytes = parse_bytes(next());
    else if (a == "--seconds")
      g_opt.seconds = std::atoi(next());
    else if (a == "--threads")
      g_opt.threads = std::atoi(next());
    else if (a == "--iterations")
      g_opt.iterations = std::atoi(next());
    else if (a == "--kernel-us")
      g_opt.kernel_us = std::atoi(next());
    else if (a == "--kernels")
      g_opt.kernels = std::atoi(next());
    else if (a == "--host-us")
      g_opt.host_us = std::atoi(next());
    else if (a == "--measure-from-ms")
      g_opt.measure_from_ms = std::atoi(next());
    else if (a == "--late-device")
      g_opt.late_device = std::atoi(next());
    else if (a == "--late-trigger")
      g_opt.late_trigger = next();
    else if (a == "--release-trigger")
      g_opt.release_trigger = next();
    else if (a == "--image")
      g_opt.image = next();
    else if (a == "--ipc-handle")
      g_opt.ipc_handle = next();
    else if (a == "--share-pid")
      g_opt.share_pid = std::atoi(next());
    else if (a == "--share-fd")
      g_opt.share_fd = std::atoi(next());
    else {
      std::fprintf(stderr, "probe_app: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (g_opt.scenario == "nvml") return nvml();
  load_driver();
  if (g_opt.scenario == "library-first") return library_first();
  open_device(g_opt.device);
  if (g_opt.scenario == "fill") return fill();
  if (g_opt.scenario == "apis") return apis();
  if (g_opt.scenario == "hold") return hold();
  if (g_opt.scenario == "threads") return threads();
  if (g_opt.scenario == "fork") return forked();
  if (g_opt.scenario == "launch") return launches();
  if (g_opt.scenario == "reservation") return reservation();
  if (g_opt.scenario == "steps") return steps();
  if (g_opt.scenario == "contexts") return contexts();
  if (g_opt.scenario == "ipc-export") return ipc_export();
  if (g_opt.scenario == "ipc-import") return ipc_import();
  if (g_opt.scenario == "vmm-export") return vmm_export();
  if (g_opt.scenario == "vmm-import") return vmm_import();
  if (g_opt.scenario == "vmm-move") return vmm_move();
  std::fprintf(stderr, "probe_app: unknown scenario %s\n", g_opt.scenario.c_str());
  return 2;
}
