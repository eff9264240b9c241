// Modules, kernel launches, streams and events of the simulated libcuda.
//
// A launch returns at once and places the kernel's duration on its device's timeline (one per
// device, shared by all streams and processes: the simplest faithful model of a fully busy
// GPU). Synchronisation sleeps until the timeline reaches the awaited work; queries compare.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "cuda_internal.h"
#include "interposer/module_image.h"

namespace gpuslice::mock {
namespace {

// "sleep_<N>us" runs N microseconds; any other kernel takes GPUSLICE_MOCK_KERNEL_NS.
std::uint64_t kernel_duration_ns(const char* name, std::uint64_t fallback) {
  constexpr std::size_t kPrefix = sizeof("sleep_") - 1;
  std::size_t length = std::strlen(name);
  if (length <= kPrefix + 2 || std::strncmp(name, "sleep_", kPrefix) != 0 ||
      std::strcmp(name + length - 2, "us") != 0) {
    return fallback;
  }
  std::uint64_t micros = 0;
  for (const char* p = name + kPrefix; p < name + length - 2; ++p) {
    if (*p < '0' || *p > '9') return fallback;
    if (__builtin_mul_overflow(micros, 10u, &micros) ||
        __builtin_add_overflow(micros, static_cast<std::uint64_t>(*p - '0'), &micros)) {
      return fallback;
    }
  }
  std::uint64_t nanos = 0;
  return __builtin_mul_overflow(micros, 1000u, &nanos) ? fallback : nanos;
}

CUresult enqueue_work(CUstream handle, std::uint64_t duration_ns) {
  CUstream_st* stream = nullptr;
  CUresult status = resolve_stream(handle, &stream);
  if (status != CUDA_SUCCESS) return status;
  Driver& state = driver();
  // An MPS client limited to a share of the SMs: its kernels (here all of them fill the GPU) take longer.
  if (state.config.mps && state.config.mps_thread_share < 100)
    duration_ns = duration_ns * 100 / state.config.mps_thread_share;
  const unsigned device = stream->context->device;
  LaunchQueue& queue = state.launch_queue[device];
  std::atomic<std::uint64_t>* slot = nullptr;
  if (queue.depth != 0) {
    slot = &queue.ends[queue.next.fetch_add(1, std::memory_order_relaxed) % queue.depth];
    std::uint64_t oldest = slot->load(std::memory_order_acquire);
    if (oldest != 0 && oldest > state.shared.now_ns()) state.shared.wait_until(oldest);
  }
  std::uint64_t end = state.shared.enqueue(device, duration_ns);
  if (slot != nullptr) slot->store(end, std::memory_order_release);
  store_max(stream->last_end_ns, end);
  store_max(stream->context->last_end_ns, end);
  return CUDA_SUCCESS;
}

// "<key><N>" anywhere in `text` (N decimal), or 0.
std::uint64_t tagged_number(const char* text, const char* key) {
  const char* at = std::strstr(text, key);
  if (at == nullptr) return 0;
  std::uint64_t value = 0;
  for (const char* p = at + std::strlen(key); *p >= '0' && *p <= '9'; ++p) {
    if (__builtin_mul_overflow(value, 10u, &value) ||
        __builtin_add_overflow(value, static_cast<std::uint64_t>(*p - '0'), &value))
      return 0;
  }
  return value;
}

}  // namespace

CUresult load_function(CUfunction f, unsigned device) {
  Driver& state = driver();
  if (f->loaded.load(std::memory_order_acquire)) return CUDA_SUCCESS;
  std::lock_guard<std::mutex> lock(state.mutex);
  if (f->loaded.load(std::memory_order_relaxed)) return CUDA_SUCCESS;
  CUmod_st* module = f->module;
  if (is_live(module) && module->lazy_bytes + module->pending_globals != 0) {
    const std::uint64_t bytes = module->lazy_bytes + module->pending_globals;
    if (!state.shared.charge(device, bytes, false)) return CUDA_ERROR_OUT_OF_MEMORY;
    module->charged += bytes;
    module->pending_globals = 0;
  }
  f->loaded.store(true, std::memory_order_release);
  return CUDA_SUCCESS;
}

namespace {

// What the driver does before a function first runs: load its code (lazy loading), and grow the
// stack when its local memory per thread exceeds the limit. Either may fail for want of memory.
CUresult prepare_function(CUctx_st* context, CUfunction f) {
  Driver& state = driver();
  const unsigned device = context->device;
  CUresult status = load_function(f, device);
  if (status != CUDA_SUCCESS) return status;
  if (f->local_bytes <= state.stack_limit[device].load(std::memory_order_acquire)) return CUDA_SUCCESS;
  std::lock_guard<std::mutex> lock(state.mutex);
  if (f->local_bytes > state.limits[device].value[CU_LIMIT_STACK_SIZE])
    return set_limit_locked(state, device, CU_LIMIT_STACK_SIZE, f->local_bytes);
  return CUDA_SUCCESS;
}

// A context's first launch takes its launch resources (GPUSLICE_MOCK_FIRST_LAUNCH_BYTES), counted
// as the context's and given back with it.
// Lazy loading (the default) also loads the independent libraries into the context now.
CUresult first_launch_resources(CUctx_st* context) {
  if (context->launched.load(std::memory_order_acquire)) return CUDA_SUCCESS;
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (context->launched.load(std::memory_order_relaxed)) return CUDA_SUCCESS;
  const std::uint64_t bytes = state.config.first_launch_bytes;
  if (bytes != 0 && !state.shared.charge(context->device, bytes, true)) return CUDA_ERROR_OUT_OF_MEMORY;
  if (!take_library_globals_locked(state, context)) {
    if (bytes != 0) state.shared.uncharge(context->device, bytes, true);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  context->charged += bytes;
  context->launched.store(true, std::memory_order_release);
  return CUDA_SUCCESS;
}

CUresult launch(CUfunction f, unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block_x,
                unsigned block_y, unsigned block_z, CUstream stream) {
  CUctx_st* context = nullptr;
  CUresult status = current_context(&context);
  if (status != CUDA_SUCCESS) return status;
  if (!is_live(f)) return CUDA_ERROR_INVALID_HANDLE;
  if (grid_x == 0 || grid_y == 0 || grid_z == 0 || block_x == 0 || block_y == 0 || block_z == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  status = prepare_function(context, f);
  if (status != CUDA_SUCCESS) return status;
  status = first_launch_resources(context);
  if (status != CUDA_SUCCESS) return status;
  return enqueue_work(stream, f->duration_ns);
}

CUresult live_event(CUevent event) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  return is_live(event) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

}  // namespace

void reset_launch_queues_locked(Driver& state) {
  for (unsigned device = 0; device < kMaxDevices; ++device) {
    LaunchQueue& queue = state.launch_queue[device];
    queue.depth =
        device < state.shared.device_count() ? static_cast<std::size_t>(state.config.queue_depth) : 0;
    queue.ends.reset(queue.depth == 0 ? nullptr : new std::atomic<std::uint64_t>[queue.depth]);
    for (std::size_t i = 0; i < queue.depth; ++i) queue.ends[i].store(0, std::memory_order_relaxed);
    queue.next.store(0, std::memory_order_relaxed);
  }
}

bool eager_loading() {
  const char* mode = std::getenv("CUDA_MODULE_LOADING");
  return mode != nullptr && std::strcmp(mode, "EAGER") == 0;
}

bool take_library_globals_locked(Driver& state, CUctx_st* context) {
  std::uint64_t due = 0;
  std::vector<Driver::IndependentLibrary*> taking;
  for (Driver::IndependentLibrary* lib : state.independent_libraries) {
    if (std::find(lib->taken_by.begin(), lib->taken_by.end(), context) != lib->taken_by.end()) continue;
    due += lib->globals;
    taking.push_back(lib);
  }
  if (due != 0 && !state.shared.charge(context->device, due, false)) return false;
  for (Driver::IndependentLibrary* lib : taking) lib->taken_by.push_back(context);
  return true;
}

void give_back_library_globals_locked(Driver& state, CUctx_st* context) {
  for (Driver::IndependentLibrary* lib : state.independent_libraries) {
    auto at = std::find(lib->taken_by.begin(), lib->taken_by.end(), context);
    if (at == lib->taken_by.end()) continue;
    state.shared.uncharge(context->device, lib->globals, false);
    lib->taken_by.erase(at);
  }
}

}  // namespace gpuslice::mock

using namespace gpuslice::mock;

extern "C" {

CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  CUctx_st* context = nullptr;
  CUresult status = current_context(&context);
  if (status != CUDA_SUCCESS) return status;
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  // The image's text may say what it takes on the device (see CUmod_st); a real image (fat binary,
  // its runtime wrapper, a cubin) takes its globals, as the library's reader sizes them for sm_90,
  // at the first launch (lazy loading, the default) or at the load (CUDA_MODULE_LOADING=EAGER).
  const auto* text = static_cast<const char*>(image);
  std::uint64_t globals = tagged_number(text, "globals=");
  std::uint64_t pending = 0;
  const gpuslice::interposer::ImageGlobals real = gpuslice::interposer::image_globals(image, kMockSm);
  if (real.understood && globals == 0) {
    const char* mode = std::getenv("CUDA_MODULE_LOADING");
    (mode != nullptr && std::strcmp(mode, "EAGER") == 0 ? globals : pending) = real.bytes;
  }
  if (globals != 0 && !state.shared.charge(context->device, globals, false)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUmod_st* created = state.modules.acquire();
  created->pending_globals = pending;
  created->context = context;
  created->functions.clear();
  created->global_bytes = globals;
  created->lazy_bytes = tagged_number(text, "lazy=");
  created->charged = globals;
  created->alive.store(true, std::memory_order_release);
  *module = created;
  return CUDA_SUCCESS;
}

// The other ways to load an image take the same path; a file is read whole (the mock's images are text).
CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int numOptions,
                            CUjit_option* options, void** optionValues) {
  (void)numOptions;
  (void)options;
  (void)optionValues;
  return cuModuleLoadData(module, image);
}

CUresult cuModuleLoadFatBinary(CUmodule* module, const void* fatCubin) {
  return cuModuleLoadData(module, fatCubin);
}

CUresult cuModuleLoad(CUmodule* module, const char* fname) {
  if (fname == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::FILE* file = std::fopen(fname, "rb");
  if (file == nullptr) return CUDA_ERROR_FILE_NOT_FOUND;
  constexpr std::size_t kMaxImage = 16u << 20;
  std::string image(kMaxImage + 1, '\0');
  const std::size_t got = std::fread(image.data(), 1, kMaxImage, file);
  std::fclose(file);
  image.resize(got + 1);  // NUL-terminated, for text images
  return cuModuleLoadData(module, image.data());
}

// A library is a module to the mock (its handle is the module's); JIT and library options are ignored.
namespace {
CUresult as_library(CUlibrary* library, CUresult (*load)(CUmodule*, const void*), const void* source) {
  if (library == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUmodule module = nullptr;
  const CUresult status = load(&module, source);
  if (status == CUDA_SUCCESS) *library = reinterpret_cast<CUlibrary>(module);
  return status;
}
CUresult load_module_file(CUmodule* module, const void* path) {
  return cuModuleLoad(module, static_cast<const char*>(path));
}
}  // namespace

// With a current context a library is a module of it; with none (the runtime's registration before
// any context), an independent library: nothing is taken until a context loads it.
CUresult cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option*, void**, unsigned int,
                           CUlibraryOption*, void**, unsigned int) {
  if (t_current_context != nullptr) return as_library(library, cuModuleLoadData, code);
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  if (library == nullptr || code == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::uint64_t globals = tagged_number(static_cast<const char*>(code), "globals=");
  const gpuslice::interposer::ImageGlobals real = gpuslice::interposer::image_globals(code, kMockSm);
  if (real.understood && globals == 0) globals = real.bytes;
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  auto* created = new Driver::IndependentLibrary;
  created->globals = globals;
  state.independent_libraries.push_back(created);
  *library = reinterpret_cast<CUlibrary>(created);
  return CUDA_SUCCESS;
}

CUresult cuLibraryLoadFromFile(CUlibrary* library, const char* fileName, CUjit_option*, void**, unsigned int,
                               CUlibraryOption*, void**, unsigned int) {
  return as_library(library, load_module_file, fileName);
}

CUresult cuLibraryUnload(CUlibrary library) {
  {
    Driver& state = driver();
    std::lock_guard<std::mutex> lock(state.mutex);
    auto& libs = state.independent_libraries;
    auto at = std::find(libs.begin(), libs.end(), reinterpret_cast<Driver::IndependentLibrary*>(library));
    if (at != libs.end()) {
      for (CUctx_st* context : (*at)->taken_by) state.shared.uncharge(context->device, (*at)->globals, false);
      delete *at;
      libs.erase(at);
      return CUDA_SUCCESS;
    }
  }
  return cuModuleUnload(reinterpret_cast<CUmodule>(library));
}

CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  if (hfunc == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (!is_live(hmod)) return CUDA_ERROR_INVALID_HANDLE;
  for (CUfunc_st* existing : hmod->functions) {
    if (existing->name == name) {
      *hfunc = existing;
      return CUDA_SUCCESS;
    }
  }
  CUfunc_st* created = state.functions.acquire();
  created->module = hmod;
  created->name = name;
  created->duration_ns = kernel_duration_ns(name, state.config.kernel_ns);
  created->local_bytes = tagged_number(name, "local_");
  created->loaded.store(false, std::memory_order_relaxed);
  created->alive.store(true, std::memory_order_release);
  hmod->functions.push_back(created);
  *hfunc = created;
  return CUDA_SUCCESS;
}

CUresult cuModuleUnload(CUmodule hmod) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (!is_live(hmod)) return CUDA_ERROR_INVALID_HANDLE;
  for (CUfunc_st* function : hmod->functions) state.functions.release(function);
  hmod->functions.clear();
  state.shared.uncharge(hmod->context->device, hmod->charged, false);
  hmod->charged = 0;
  state.modules.release(hmod);
  return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                        unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                        unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra) {
  (void)sharedMemBytes;
  (void)kernelParams;
  (void)extra;
  return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream);
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                             unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                             unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                             void** kernelParams, void** extra) {
  return cuLaunchKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
                        hStream, kernelParams, extra);
}

CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra) {
  (void)kernelParams;
  (void)extra;
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX, config->blockDimY,
                config->blockDimZ, config->hStream);
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                               void** extra) {
  return cuLaunchKernelEx(config, f, kernelParams, extra);
}

CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                   unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                   unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                   void** kernelParams) {
  (void)sharedMemBytes;
  (void)kernelParams;
  return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream);
}

CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                        void** kernelParams) {
  return cuLaunchCooperativeKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                                   sharedMemBytes, hStream, kernelParams);
}

// A graph launch counts as one kernel. An executable graph the mock instantiated backs its
// allocation nodes first (cuda_graph.cpp); any other non-null handle is taken as a graph without any.
CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  CUctx_st* context = nullptr;
  CUresult status = current_context(&context);
  if (status != CUDA_SUCCESS) return status;
  if (hGraphExec == nullptr) return CUDA_ERROR_INVALID_VALUE;
  status = prepare_graph_launch(hGraphExec);
  if (status != CUDA_SUCCESS) return status;
  return enqueue_work(hStream, driver().config.kernel_ns);
}

CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  return cuGraphLaunch(hGraphExec, hStream);
}

CUresult cuStreamCreate(CUstream* phStream, unsigned int Flags) {
  CUctx_st* context = nullptr;
  CUresult status = current_context(&context);
  if (status != CUDA_SUCCESS) return status;
  constexpr unsigned kNonBlocking = 0x1;
  if (phStream == nullptr || (Flags & ~kNonBlocking) != 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  CUstream_st* stream = state.streams.acquire();
  stream->context = context;
  stream->last_end_ns.store(0, std::memory_order_relaxed);
  stream->alive.store(true, std::memory_order_release);
  *phStream = stream;
  return CUDA_SUCCESS;
}

CUresult cuStreamDestroy_v2(CUstream hStream) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (is_default_stream(hStream) || !is_live(hStream)) return CUDA_ERROR_INVALID_HANDLE;
  state.streams.release(hStream);  // queued work still completes on the device timeline
  return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream hStream) {
  CUstream_st* stream = nullptr;
  CUresult status = resolve_stream(hStream, &stream);
  if (status != CUDA_SUCCESS) return status;
  driver().shared.wait_until(stream_done_ns(hStream, stream));
  return CUDA_SUCCESS;
}

// The _ptsz variant reads a 0 handle as the calling thread's default stream, not the legacy one.
CUresult cuStreamSynchronize_ptsz(CUstream hStream) {
  return cuStreamSynchronize(hStream == nullptr ? reinterpret_cast<CUstream>(kStreamPerThread) : hStream);
}

// Graph capture is not simulated: no stream is capturing, except the calling thread's default
// stream under GPUSLICE_MOCK_CAPTURING=per-thread (it says so; the work still runs).
CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  CUstream_st* stream = nullptr;
  CUresult status = resolve_stream(hStream, &stream);
  if (status != CUDA_SUCCESS) return status;
  if (captureStatus == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const bool per_thread = reinterpret_cast<std::uintptr_t>(hStream) == kStreamPerThread;
  *captureStatus = per_thread && driver().config.per_thread_capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE
                                                                      : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  return cuStreamIsCapturing(hStream == nullptr ? reinterpret_cast<CUstream>(kStreamPerThread) : hStream,
                             captureStatus);
}

CUresult cuStreamQuery(CUstream hStream) {
  CUstream_st* stream = nullptr;
  CUresult status = resolve_stream(hStream, &stream);
  if (status != CUDA_SUCCESS) return status;
  return driver().shared.now_ns() < stream_done_ns(hStream, stream) ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

CUresult cuEventCreate(CUevent* phEvent, unsigned int Flags) {
  CUctx_st* context = nullptr;
  CUresult status = current_context(&context);
  if (status != CUDA_SUCCESS) return status;
  constexpr unsigned kKnownFlags = 0x1 | 0x2 | 0x4;  // blocking sync, disable timing, interprocess
  if (phEvent == nullptr || (Flags & ~kKnownFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  CUevent_st* event = state.events.acquire();
  event->context = context;
  event->flags = Flags;
  event->recorded.store(false, std::memory_order_relaxed);
  event->time_ns.store(0, std::memory_order_relaxed);
  event->alive.store(true, std::memory_order_release);
  *phEvent = event;
  return CUDA_SUCCESS;
}

CUresult cuEventRecord(CUevent hEvent, CUstream hStream) {
  CUresult status = live_event(hEvent);
  if (status != CUDA_SUCCESS) return status;
  CUstream_st* stream = nullptr;
  status = resolve_stream(hStream, &stream);
  if (status != CUDA_SUCCESS) return status;
  // The event completes when the stream's earlier work does, or now if the stream is idle.
  std::uint64_t now = driver().shared.now_ns();
  std::uint64_t done = stream_done_ns(hStream, stream);
  hEvent->time_ns.store(done > now ? done : now, std::memory_order_relaxed);
  hEvent->recorded.store(true, std::memory_order_release);
  return CUDA_SUCCESS;
}

CUresult cuEventSynchronize(CUevent hEvent) {
  CUresult status = live_event(hEvent);
  if (status != CUDA_SUCCESS) return status;
  if (hEvent->recorded.load(std::memory_order_acquire)) {
    driver().shared.wait_until(hEvent->time_ns.load(std::memory_order_relaxed));
  }
  return CUDA_SUCCESS;
}

CUresult cuEventQuery(CUevent hEvent) {
  CUresult status = live_event(hEvent);
  if (status != CUDA_SUCCESS) return status;
  if (!hEvent->recorded.load(std::memory_order_acquire)) return CUDA_SUCCESS;
  return driver().shared.now_ns() < hEvent->time_ns.load(std::memory_order_relaxed) ? CUDA_ERROR_NOT_READY
                                                                                    : CUDA_SUCCESS;
}

CUresult cuEventElapsedTime_v2(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  if (pMilliseconds == nullptr) return CUDA_ERROR_INVALID_VALUE;
  constexpr unsigned kDisableTiming = 0x2;
  for (CUevent event : {hStart, hEnd}) {
    if (!is_live(event) || (event->flags & kDisableTiming) != 0 ||
        !event->recorded.load(std::memory_order_acquire)) {
      return CUDA_ERROR_INVALID_HANDLE;
    }
  }
  std::uint64_t start = hStart->time_ns.load(std::memory_order_relaxed);
  std::uint64_t end = hEnd->time_ns.load(std::memory_order_relaxed);
  std::uint64_t now = driver().shared.now_ns();
  if (now < start || now < end) return CUDA_ERROR_NOT_READY;
  double difference_ns = end >= start ? static_cast<double>(end - start) : -static_cast<double>(start - end);
  *pMilliseconds = static_cast<float>(difference_ns / 1e6);
  return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(CUevent hEvent) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (!is_live(hEvent)) return CUDA_ERROR_INVALID_HANDLE;
  state.events.release(hEvent);
  return CUDA_SUCCESS;
}

}  // extern "C"
