// Each way the driver takes device memory for itself, on a real GPU (docs/quota.md): run under
// libgpuslice.so with a quota, it prints what the CUDA calls answered; the driver's own figure is
// sampled from outside (tests/gpu/driver_paths.py, un-hooked nvidia-smi).
// Usage: driver_paths heap|stack|growth|graph|capture|module|contexts|printf|churn [SECONDS] [SEED]
#include <cuda.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr size_t kMiB = 1ULL << 20;
constexpr size_t kGiB = 1ULL << 30;

void say(const char* what, int code) { std::printf("%s=%d\n", what, code), std::fflush(stdout); }

// Each thread mallocs `each` bytes from the device heap and writes to it.
__global__ void heap_user(size_t each, int* failed) {
  char* p = static_cast<char*>(malloc(each));
  if (p == nullptr) {
    atomicAdd(failed, 1);
    return;
  }
  for (size_t i = 0; i < each; i += 4096) p[i] = 1;
}

__global__ void plain(int* out) {
  if (out != nullptr) out[threadIdx.x] = threadIdx.x;
}

// About 40 KiB of local memory per thread: launching it grows the stack for every resident thread.
__global__ void big_local(int* out, int n) {
  volatile char buf[40 * 1024];
  for (int i = 0; i < n; ++i) buf[(i * 977) % sizeof(buf)] = static_cast<char>(i);
  if (out != nullptr) out[threadIdx.x] = buf[threadIdx.x % sizeof(buf)];
}

// PTX of a module with a 3 GiB global, loaded through the driver API.
const char kBigModule[] =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".global .align 8 .b8 big[3221225472];\n"
    ".visible .entry touch(){\n .reg .b64 %rd<2>;\n mov.u64 %rd1, big;\n st.global.u8 [%rd1], 1;\n ret;\n}\n";

void hold(int seconds) {
  cudaDeviceSynchronize();
  sleep(static_cast<unsigned>(seconds));
}

int heap() {
  say("set_code", cudaDeviceSetLimit(cudaLimitMallocHeapSize, 12 * kGiB + kGiB / 4));
  int* failed = nullptr;
  cudaMalloc(&failed, sizeof(int));
  cudaMemset(failed, 0, sizeof(int));
  // 9 GiB of device-side mallocs: 9216 threads x 1 MiB.
  heap_user<<<72, 128>>>(kMiB, failed);
  say("kernel_code", cudaDeviceSynchronize());
  hold(2);
  void* more = nullptr;
  say("more_code", cudaMalloc(&more, kGiB));
  hold(1);
  return 0;
}

int stack() {
  say("set_code", cudaDeviceSetLimit(cudaLimitStackSize, 47 * 1024));
  plain<<<1, 32>>>(nullptr);
  say("launch_code", cudaDeviceSynchronize());
  hold(2);
  void* more = nullptr;
  say("more_code", cudaMalloc(&more, kGiB));
  hold(1);
  return 0;
}

int growth() {
  cudaFuncAttributes attr{};
  cudaFuncGetAttributes(&attr, big_local);
  std::printf("local_bytes=%zu\n", attr.localSizeBytes);
  big_local<<<132, 256>>>(nullptr, 64);
  say("launch_code", cudaGetLastError());
  say("sync_code", cudaDeviceSynchronize());
  hold(2);
  return 0;
}

int graph() {
  cudaGraph_t g = nullptr;
  cudaGraphCreate(&g, 0);
  cudaMemAllocNodeParams params{};
  params.poolProps.allocType = cudaMemAllocationTypePinned;
  params.poolProps.location.type = cudaMemLocationTypeDevice;
  params.poolProps.location.id = 0;
  params.bytesize = 12 * kGiB;
  cudaGraphNode_t node = nullptr;
  say("node_code", cudaGraphAddMemAllocNode(&node, g, nullptr, 0, &params));
  cudaGraphExec_t exec = nullptr;
  say("instantiate_code", cudaGraphInstantiate(&exec, g, 0));
  if (exec != nullptr) say("launch_code", cudaGraphLaunch(exec, 0));
  say("sync_code", cudaDeviceSynchronize());
  hold(2);
  return 0;
}

int capture() {
  cudaStream_t s = nullptr;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
  int refused = 0;
  for (int i = 0; i < 12; ++i) {
    void* p = nullptr;
    if (cudaMallocAsync(&p, kGiB, s) != cudaSuccess) ++refused;
  }
  cudaGraph_t g = nullptr;
  say("capture_code", cudaStreamEndCapture(s, &g));
  std::printf("refused_in_capture=%d\n", refused);
  cudaGetLastError();
  cudaGraphExec_t exec = nullptr;
  if (g != nullptr) say("instantiate_code", cudaGraphInstantiate(&exec, g, 0));
  if (exec != nullptr) say("launch_code", cudaGraphLaunch(exec, s));
  say("sync_code", cudaStreamSynchronize(s));
  hold(2);
  return 0;
}

int module() {
  cudaFree(nullptr);  // the primary context
  void* held = nullptr;
  say("held_code", cudaMalloc(&held, 6 * kGiB));
  CUmodule mod = nullptr;
  say("load_code", cuModuleLoadData(&mod, kBigModule));
  if (mod != nullptr) {
    CUfunction f = nullptr;
    cuModuleGetFunction(&f, mod, "touch");
    say("launch_code", cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr));
  }
  say("sync_code", cudaDeviceSynchronize());
  hold(2);
  return 0;
}

// Allocates and frees 64 MiB-1 GiB buffers (touched) for `seconds`; a refusal frees one buffer.
int churn(int seconds, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::pair<void*, size_t>> held;
  long ok = 0, refused = 0;
  const time_t end = time(nullptr) + seconds;
  while (time(nullptr) < end) {
    size_t bytes = (64 + rng() % 961) * kMiB;
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) == cudaSuccess) {
      cudaMemset(p, 1, bytes);
      held.emplace_back(p, bytes);
      ++ok;
    } else {
      cudaGetLastError();
      ++refused;
      if (!held.empty()) {
        size_t i = rng() % held.size();
        cudaFree(held[i].first);
        held.erase(held.begin() + static_cast<long>(i));
      }
    }
    if (held.size() > 6 || (rng() % 3 == 0 && !held.empty())) {
      size_t i = rng() % held.size();
      cudaFree(held[i].first);
      held.erase(held.begin() + static_cast<long>(i));
    }
    cudaDeviceSynchronize();
    usleep(2000);
  }
  std::printf("allocations=%ld refusals=%ld\n", ok, refused);
  return 0;
}

// 64 contexts of its own (cuCtxCreate), each made current with one launch: every context takes its
// footprint (about 590 MiB on an H200).
int contexts() {
  cuInit(0);
  CUdevice dev = 0;
  cuDeviceGet(&dev, 0);
  std::vector<CUcontext> made;
  int refused = 0;
  for (int i = 0; i < 64; ++i) {
    CUcontext ctx = nullptr;
    const CUresult r = cuCtxCreate(&ctx, nullptr, 0, dev);
    if (r != CUDA_SUCCESS) {
      refused = static_cast<int>(r);
      break;
    }
    made.push_back(ctx);
    cuCtxSetCurrent(ctx);
    plain<<<1, 32>>>(nullptr);
    cudaDeviceSynchronize();
  }
  say("contexts_created", static_cast<int>(made.size()));
  say("context_refused", refused);
  hold(2);
  for (CUcontext ctx : made) cuCtxDestroy(ctx);
  return 0;
}

// The printf FIFO set to 12 GiB, then a kernel that prints.
__global__ void printer() {
  if (threadIdx.x == 0) printf("printf fifo in use\n");
}
int printf_fifo() {
  say("set_printf", static_cast<int>(cudaDeviceSetLimit(cudaLimitPrintfFifoSize, 12 * kGiB)));
  printer<<<1, 32>>>();
  say("launch", static_cast<int>(cudaDeviceSynchronize()));
  hold(2);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string mode = argc > 1 ? argv[1] : "";
  cudaSetDevice(0);
  if (mode == "heap") return heap();
  if (mode == "stack") return stack();
  if (mode == "growth") return growth();
  if (mode == "graph") return graph();
  if (mode == "capture") return capture();
  if (mode == "module") return module();
  if (mode == "contexts") return contexts();
  if (mode == "printf") return printf_fifo();
  if (mode == "churn") return churn(argc > 2 ? std::atoi(argv[2]) : 60, argc > 3 ? std::atoi(argv[3]) : 1);
  std::fprintf(stderr, "usage: driver_paths heap|stack|growth|graph|capture|module|contexts|printf|churn [SECONDS] [SEED]\n");
  return 2;
}
