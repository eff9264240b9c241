// What the driver takes for one process without an allocation call, by the driver's own figure
// (NVML's per-process used memory), step by step: the context, each cuCtxSetLimit reservation, the
// stack's automatic growth at launch, a module's globals at lazy loading, graph memory pools,
// stream-ordered pools, and the granularity of small allocations. Also what one NVML per-process
// query costs, which bounds how often the books can be reconciled with it.
// No gpuslice involved. Build: nvcc -O2 -arch=sm_90 -o driver_footprint driver_footprint.cu -lcuda -ldl
// Run: ./driver_footprint [device]   (prints one line per step: step, delta MiB, total MiB)
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {
struct NvmlProcess {  // nvmlProcessInfo_t (v2/v3 layout)
  unsigned pid;
  unsigned long long used;
  unsigned gpu_instance;
  unsigned compute_instance;
};
using NvmlInit = int (*)();
using NvmlHandle = int (*)(unsigned, void**);
using NvmlProcs = int (*)(void*, unsigned*, NvmlProcess*);
NvmlProcs g_procs = nullptr;
void* g_dev = nullptr;

#define CK(x)                                                                        \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      std::printf("FAIL %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

double own_mib() {
  NvmlProcess p[256];
  unsigned n = 256;
  if (g_procs(g_dev, &n, p) != 0) return -1;
  for (unsigned i = 0; i < n; ++i)
    if (p[i].pid == static_cast<unsigned>(getpid())) return static_cast<double>(p[i].used) / 1048576.0;
  return 0;
}

double g_last = 0;
void step(const char* what) {
  cudaDeviceSynchronize();
  double now = own_mib();
  std::printf("%-58s delta %9.1f MiB  total %9.1f MiB\n", what, now - g_last, now);
  std::fflush(stdout);
  g_last = now;
}

__global__ void empty_kernel() {}
__global__ void heap_kernel(size_t bytes_per_thread, int* ok) {
  char* p = static_cast<char*>(malloc(bytes_per_thread));
  if (p != nullptr) {
    p[0] = 1;
    atomicAdd(ok, 1);
  }
}
// A per-thread local array the compiler must keep in local memory: the launch grows the stack.
__global__ void local_kernel(int n, int* out) {
  volatile int buf[8192];  // 32 KiB a thread
  for (int i = 0; i < n; ++i) buf[i] = i * threadIdx.x;
  out[threadIdx.x] = buf[n - 1];
}
__device__ char g_big_global[256u << 20];  // 256 MiB of module globals
__global__ void touch_global() { g_big_global[threadIdx.x] = 1; }
}  // namespace

int main(int argc, char** argv) {
  int dev = argc > 1 ? std::atoi(argv[1]) : 0;
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (nvml == nullptr) return std::printf("FAIL no libnvidia-ml.so.1\n"), 1;
  auto init = reinterpret_cast<NvmlInit>(dlsym(nvml, "nvmlInit_v2"));
  auto handle = reinterpret_cast<NvmlHandle>(dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2"));
  g_procs = reinterpret_cast<NvmlProcs>(dlsym(nvml, "nvmlDeviceGetComputeRunningProcesses_v3"));
  if (init() != 0 || handle(static_cast<unsigned>(dev), &g_dev) != 0) return std::printf("FAIL nvml\n"), 1;

  CK(cudaSetDevice(dev));
  CK(cudaFree(nullptr));
  step("context (runtime primary context, lazy loading default)");
  int sms = 0, threads = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaDeviceGetAttribute(&threads, cudaDevAttrMaxThreadsPerMultiProcessor, dev);
  size_t v = 0;
  std::printf("SMs %d, max threads/SM %d, resident threads %d\n", sms, threads, sms * threads);
  cudaDeviceGetLimit(&v, cudaLimitStackSize);
  std::printf("default stack %zu B/thread\n", v);
  cudaDeviceGetLimit(&v, cudaLimitMallocHeapSize);
  std::printf("default malloc heap %zu B\n", v);
  cudaDeviceGetLimit(&v, cudaLimitPrintfFifoSize);
  std::printf("default printf fifo %zu B\n", v);
  cudaDeviceGetLimit(&v, cudaLimitDevRuntimePendingLaunchCount);
  std::printf("default pending launches %zu\n", v);

  // NVML query cost: the reconciliation's unit price.
  {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 200; ++i) own_mib();
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    std::printf("nvmlDeviceGetComputeRunningProcesses_v3: %.1f us per call\n", static_cast<double>(ns) / 200 / 1000);
  }

  empty_kernel<<<1, 1>>>();
  step("first launch of an empty kernel (lazy module load)");
  void* p = nullptr;
  CK(cudaMalloc(&p, 1));
  step("cudaMalloc(1 B)");
  CK(cudaFree(p));
  step("cudaFree(1 B)");
  CK(cudaMalloc(&p, 64u << 20));
  step("cudaMalloc(64 MiB)");
  CK(cudaFree(p));
  step("cudaFree(64 MiB)");

  size_t stack = 47 * 1024;
  CK(cudaDeviceSetLimit(cudaLimitStackSize, stack));
  step("cudaDeviceSetLimit(stack, 47 KiB)");
  std::printf("  47 KiB x resident threads = %.1f MiB\n", 47.0 * 1024 * sms * threads / 1048576.0);
  empty_kernel<<<1, 1>>>();
  step("launch after stack limit");
  CK(cudaDeviceSetLimit(cudaLimitStackSize, 1024));
  step("cudaDeviceSetLimit(stack, 1 KiB)");

  int* d = nullptr;
  CK(cudaMalloc(&d, 4096 * sizeof(int)));
  step("cudaMalloc(16 KiB) for outputs");
  cudaFuncAttributes fa{};
  cudaFuncGetAttributes(&fa, local_kernel);
  std::printf("local_kernel localSizeBytes %zu\n", static_cast<size_t>(fa.localSizeBytes));
  local_kernel<<<1, 32>>>(8192, d);
  CK(cudaGetLastError());
  step("launch of a kernel with 32 KiB local/thread (automatic stack growth)");
  cudaDeviceGetLimit(&v, cudaLimitStackSize);
  std::printf("  stack limit after growth %zu B/thread\n", v);
  CK(cudaDeviceSetLimit(cudaLimitStackSize, 1024));
  step("cudaDeviceSetLimit(stack, 1 KiB) after growth");

  CK(cudaDeviceSetLimit(cudaLimitMallocHeapSize, 1ull << 30));
  step("cudaDeviceSetLimit(malloc heap, 1 GiB)");
  int* ok = d;
  heap_kernel<<<64, 256>>>(32 * 1024, ok);
  CK(cudaGetLastError());
  step("kernel mallocs 16384 x 32 KiB from the heap");

  CK(cudaDeviceSetLimit(cudaLimitPrintfFifoSize, 256u << 20));
  step("cudaDeviceSetLimit(printf fifo, 256 MiB)");
  empty_kernel<<<1, 1>>>();
  step("launch after printf fifo");
  if (cudaDeviceSetLimit(cudaLimitDevRuntimePendingLaunchCount, 1u << 20) == cudaSuccess) {
    step("cudaDeviceSetLimit(pending launches, 1M)");
    empty_kernel<<<1, 1>>>();
    step("launch after pending launches");
  } else {
    std::printf("pending launch count: refused\n");
  }

  touch_global<<<1, 32>>>();
  CK(cudaGetLastError());
  step("first launch touching a 256 MiB __device__ global");

  // Graph memory: an allocation node of 1 GiB.
  {
    cudaGraph_t g;
    CK(cudaGraphCreate(&g, 0));
    cudaMemAllocNodeParams params{};
    params.poolProps.allocType = cudaMemAllocationTypePinned;
    params.poolProps.location.type = cudaMemLocationTypeDevice;
    params.poolProps.location.id = dev;
    params.bytesize = 1ull << 30;
    cudaGraphNode_t alloc_node;
    CK(cudaGraphAddMemAllocNode(&alloc_node, g, nullptr, 0, &params));
    step("cudaGraphAddMemAllocNode(1 GiB)");
    cudaGraphExec_t exec;
    CK(cudaGraphInstantiate(&exec, g, 0));
    step("cudaGraphInstantiate");
    CK(cudaGraphUpload(exec, 0));
    step("cudaGraphUpload");
    CK(cudaGraphLaunch(exec, 0));
    step("cudaGraphLaunch (allocation stays: no free node)");
    unsigned long long rc = 0, rh = 0, uc = 0, uh = 0;
    cudaDeviceGetGraphMemAttribute(dev, cudaGraphMemAttrReservedMemCurrent, &rc);
    cudaDeviceGetGraphMemAttribute(dev, cudaGraphMemAttrReservedMemHigh, &rh);
    cudaDeviceGetGraphMemAttribute(dev, cudaGraphMemAttrUsedMemCurrent, &uc);
    cudaDeviceGetGraphMemAttribute(dev, cudaGraphMemAttrUsedMemHigh, &uh);
    std::printf("  graph mem: reserved %.1f MiB (high %.1f), used %.1f MiB (high %.1f)\n", rc / 1048576.0,
                rh / 1048576.0, uc / 1048576.0, uh / 1048576.0);
    CK(cudaFree(params.dptr));
    step("cudaFree of the graph's allocation");
    CK(cudaDeviceGraphMemTrim(dev));
    step("cudaDeviceGraphMemTrim");
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
    step("graph destroyed");
  }

  // Stream-ordered pool: freed memory stays in the pool until a sync trims it (threshold 0).
  {
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    void* a = nullptr;
    CK(cudaMallocAsync(&a, 1ull << 30, s));
    CK(cudaStreamSynchronize(s));
    step("cudaMallocAsync(1 GiB)");
    CK(cudaFreeAsync(a, s));
    step("cudaFreeAsync + sync");
    cudaStreamDestroy(s);
  }

  // Captured stream-ordered allocation: the graph's pool.
  {
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    cudaGraph_t g;
    void* a = nullptr;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CK(cudaMallocAsync(&a, 512u << 20, s));
    CK(cudaStreamEndCapture(s, &g));
    step("captured cudaMallocAsync(512 MiB)");
    cudaGraphExec_t exec;
    CK(cudaGraphInstantiate(&exec, g, 0));
    CK(cudaGraphLaunch(exec, s));
    step("instantiate + launch of the captured graph");
    CK(cudaFree(a));
    CK(cudaDeviceGraphMemTrim(dev));
    step("free + trim");
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
    cudaStreamDestroy(s);
  }
  std::printf("done\n");
  return 0;
}
