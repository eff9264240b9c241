// Initialisation, devices and contexts of the simulated libcuda, plus its test controls.
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>

#include "cuda_internal.h"
#include "mock_control.h"
#include "mock_log.h"

namespace gpuslice::mock {
namespace {

std::atomic<Driver*> g_instance{nullptr};

bool valid_device(const Driver& state, CUdevice device) {
  return device >= 0 && static_cast<unsigned>(device) < state.shared.device_count();
}

CUresult create_context_locked(Driver& state, unsigned device, bool primary, CUctx_st** out) {
  // The first context's footprint is charged once per process and device; every further context
  // takes its own, as on a real GPU. Both show up in cuMemGetInfo and as the process's usage in NVML.
  std::uint64_t further = 0;
  if (state.context_count[device] == 0) {
    std::uint64_t bytes = state.config.context_bytes;
    if (!state.shared.charge(device, bytes, true)) return CUDA_ERROR_OUT_OF_MEMORY;
    state.context_charge[device] = bytes;
    state.shared.set_has_context(device, true);
  } else {
    further = state.config.further_context_bytes;
    if (further != 0 && !state.shared.charge(device, further, true)) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  CUctx_st* context = state.contexts.acquire();
  context->device = device;
  if (eager_loading() && !take_library_globals_locked(state, context)) {
    // (the context's own footprint is given back as if it had been created and destroyed)
    state.contexts.release(context);
    if (state.context_count[device] == 0) {
      state.shared.uncharge(device, state.context_charge[device], true);
      state.context_charge[device] = 0;
      state.shared.set_has_context(device, false);
    } else if (further != 0) {
      state.shared.uncharge(device, further, true);
    }
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  ++state.context_count[device];
  context->device = device;
  context->primary = primary;
  context->charged = further;
  context->launched.store(false, std::memory_order_relaxed);
  static std::uint64_t next_id = 0;  // under Driver::mutex, like the pool
  context->id = ++next_id;
  context->last_end_ns.store(0, std::memory_order_relaxed);
  context->null_stream.context = context;
  context->null_stream.last_end_ns.store(0, std::memory_order_relaxed);
  context->null_stream.alive.store(true, std::memory_order_release);
  context->alive.store(true, std::memory_order_release);
  *out = context;
  return CUDA_SUCCESS;
}

void destroy_context_locked(Driver& state, CUctx_st* context) {
  release_context_memory_locked(state, context);
  give_back_library_globals_locked(state, context);
  state.streams.for_each_live([&](CUstream_st* stream) {
    if (stream->context == context) state.streams.release(stream);
  });
  state.events.for_each_live([&](CUevent_st* event) {
    if (event->context == context) state.events.release(event);
  });
  state.modules.for_each_live([&](CUmod_st* module) {
    if (module->context != context) return;
    state.shared.uncharge(module->context->device, module->charged, false);
    module->charged = 0;
    for (CUfunc_st* function : module->functions) state.functions.release(function);
    module->functions.clear();
    state.modules.release(module);
  });
  context->null_stream.alive.store(false, std::memory_order_release);
  const unsigned device = context->device;
  if (context->charged != 0) state.shared.uncharge(device, context->charged, true);
  context->charged = 0;
  state.contexts.release(context);
  if (--state.context_count[device] == 0) {
    reset_limits_locked(state, device);
    reset_graph_pool_locked(state, device);
    state.shared.uncharge(device, state.context_charge[device], true);
    state.context_charge[device] = 0;
    state.shared.set_has_context(device, false);
  }
  if (t_current_context == context) t_current_context = nullptr;
}

// Everything process-local back to "before cuInit". unmap = false in a fork child, whose
// mappings are private copies nobody else can see anyway.
void forget_process_locked(Driver& state, bool unmap) {
  drop_all_memory_locked(state, unmap);
  state.contexts.release_all();
  state.streams.release_all();
  state.events.release_all();
  state.modules.release_all();
  state.functions.release_all();
  state.pools.release_all();
  state.arrays.release_all();
  state.mipmapped_arrays.release_all();
  for (unsigned device = 0; device < kMaxDevices; ++device) {
    state.primary[device] = nullptr;
    state.primary_refs[device] = 0;
    state.context_count[device] = 0;
    state.context_charge[device] = 0;
    state.default_pool[device] = nullptr;
    state.limits[device] = DeviceLimits{};
    state.stack_limit[device].store(kDefaultLimits[CU_LIMIT_STACK_SIZE], std::memory_order_relaxed);
    state.graph_pool[device] = GraphPool{};
  }
  state.graphs.clear();
  state.graph_execs.clear();
  t_current_context = nullptr;
}

void before_fork() { driver().mutex.lock(); }
void after_fork_in_parent() { driver().mutex.unlock(); }
// A real driver is unusable in a fork child; the mock lets the child start over with cuInit as a
// new process of its own (its own slot), which is what multi-process tests need.
void after_fork_in_child() {
  Driver& state = driver();
  if (state.phase.load(std::memory_order_relaxed) == static_cast<int>(Phase::Ready)) {
    forget_process_locked(state, false);
    state.shared.abandon();
    state.phase.store(static_cast<int>(Phase::Uninitialized), std::memory_order_release);
  }
  state.mutex.unlock();
}

__attribute__((destructor)) void release_slot_at_exit() {
  Driver* state = g_instance.load(std::memory_order_acquire);
  if (state == nullptr) return;
  std::lock_guard<std::mutex> lock(state->mutex);
  if (state->phase.load(std::memory_order_relaxed) != static_cast<int>(Phase::Ready)) return;
  // Other threads may still touch device memory during exit: give the memory back to the shared
  // state (what NVML and other processes see) but leave our mappings alone.
  state->shared.detach();
  state->phase.store(static_cast<int>(Phase::Deinitialized), std::memory_order_release);
}

}  // namespace

Driver& driver() {
  // Never destroyed: calls can arrive from other threads and destructors during exit. Not on the
  // heap either, so a library that is merely loaded and unloaded leaves nothing behind.
  alignas(Driver) static unsigned char storage[sizeof(Driver)];
  static Driver* instance = [] {
    auto* created = new (storage) Driver();
    g_instance.store(created, std::memory_order_release);
    return created;
  }();
  return *instance;
}

void create_default_pools_locked(Driver& state) {
  for (unsigned device = 0; device < state.shared.device_count(); ++device) {
    CUmemPoolHandle_st* pool = state.pools.acquire();
    pool->device = device;
    pool->is_default = true;
    pool->used_bytes = 0;
    pool->alive.store(true, std::memory_order_release);
    state.default_pool[device] = pool;
  }
}

}  // namespace gpuslice::mock

using namespace gpuslice::mock;

extern "C" {

// MPS: a client of another user waits, silently, until the server's clients have all ended (the
// control daemon starts that user's server only then). Modelled by <pipe dir>/mock-server-uid: while
// it names another uid, cuInit waits. Then what the client read is written to
// GPUSLICE_MOCK_MPS_REPORT, for tests to see what the driver saw.
static void mps_connect(const gpuslice::mock::MockConfig& config) {
  char path[600];
  std::snprintf(path, sizeof path, "%s/mock-server-uid", config.mps_pipe_dir);
  for (;;) {
    FILE* f = std::fopen(path, "r");
    unsigned uid = 0;
    const bool other = f != nullptr && std::fscanf(f, "%u", &uid) == 1 && uid != getuid();
    if (f != nullptr) std::fclose(f);
    if (!other) break;
    const timespec pause{0, 10'000'000};
    nanosleep(&pause, nullptr);
  }
  const char* report = std::getenv("GPUSLICE_MOCK_MPS_REPORT");
  if (report == nullptr || *report == '\0') return;
  if (FILE* f = std::fopen(report, "w")) {
    std::fprintf(f, "pipe=%s\npinned=%s\npriority=%s\nthreads=%s\n", config.mps_pipe_dir,
                 config.mps_pinned_text, config.mps_priority, config.mps_threads);
    std::fclose(f);
  }
}

CUresult cuInit(unsigned int Flags) {
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& state = driver();
  if (state.phase.load(std::memory_order_acquire) == static_cast<int>(Phase::Ready)) return CUDA_SUCCESS;
  std::lock_guard<std::mutex> lock(state.mutex);
  switch (static_cast<Phase>(state.phase.load(std::memory_order_relaxed))) {
    case Phase::Ready:
      return CUDA_SUCCESS;
    case Phase::Deinitialized:
      return CUDA_ERROR_DEINITIALIZED;
    case Phase::Uninitialized:
      break;
  }
  if (!load_config(&state.config)) return CUDA_ERROR_INVALID_VALUE;
  if (state.config.device_count == 0) return CUDA_ERROR_NO_DEVICE;
  if (state.config.mps) mps_connect(state.config);
  if (state.shared.attach(state.config, true) != SharedState::AttachError::None) return CUDA_ERROR_UNKNOWN;
  if (state.shared.device_count() == 0) {
    state.shared.detach();
    return CUDA_ERROR_NO_DEVICE;
  }
  create_default_pools_locked(state);
  reset_launch_queues_locked(state);
  for (unsigned device = 0; device < kMaxDevices; ++device) reset_limits_locked(state, device);
  static bool fork_handlers_registered = false;
  if (!fork_handlers_registered) {
    pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
    fork_handlers_registered = true;
  }
  MOCK_LOG("cuInit: %u simulated devices, state in %s", state.shared.device_count(), state.config.state_dir);
  state.phase.store(static_cast<int>(Phase::Ready), std::memory_order_release);
  return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int* driverVersion) {
  if (driverVersion == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& state = driver();
  if (check_ready() == CUDA_SUCCESS) {
    *driverVersion = state.config.driver_version;
    return CUDA_SUCCESS;
  }
  MockConfig config;  // allowed before cuInit, like the real call
  *driverVersion = load_config(&config) ? config.driver_version : kDefaultDriverVersion;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(driver(), ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int* count) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = static_cast<int>(driver().shared.device_count());
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(driver(), dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(name, static_cast<std::size_t>(len), "%s", kDeviceName);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(driver(), dev)) return CUDA_ERROR_INVALID_DEVICE;
  unsigned char bytes[16] = {};
  uuid_bytes(driver().shared.uuid(static_cast<unsigned>(dev)), bytes);
  std::memcpy(uuid->bytes, bytes, sizeof(bytes));
  return CUDA_SUCCESS;
}

// _v2 differs from the first version only under MIG, which the mock does not simulate.
CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) { return cuDeviceGetUuid(uuid, dev); }

CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(driver(), dev)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = driver().shared.total_bytes(static_cast<unsigned>(dev));
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& state = driver();
  if (!valid_device(state, dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(state.mutex);
  const auto device = static_cast<unsigned>(dev);
  if (state.primary[device] == nullptr) {
    CUresult status = create_context_locked(state, device, true, &state.primary[device]);
    if (status != CUDA_SUCCESS) return status;
  }
  ++state.primary_refs[device];
  *pctx = state.primary[device];
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  Driver& state = driver();
  if (!valid_device(state, dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(state.mutex);
  const auto device = static_cast<unsigned>(dev);
  if (state.primary_refs[device] == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--state.primary_refs[device] == 0) {
    destroy_context_locked(state, state.primary[device]);
    state.primary[device] = nullptr;
  }
  return CUDA_SUCCESS;
}

CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  (void)flags;  // scheduling flags change nothing in the simulation
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& state = driver();
  if (!valid_device(state, dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(state.mutex);
  CUctx_st* context = nullptr;
  CUresult status = create_context_locked(state, static_cast<unsigned>(dev), false, &context);
  if (status != CUDA_SUCCESS) return status;
  t_current_context = context;
  *pctx = context;
  return CUDA_SUCCESS;
}

CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags, CUdevice dev) {
  (void)params;  // execution affinity and CIG parameters are not simulated
  return cuCtxCreate_v2(pctx, flags, dev);
}

// Execution affinity is not simulated: the context is an ordinary one.
CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* paramsArray, int numParams, unsigned int flags,
                        CUdevice dev) {
  (void)paramsArray;
  (void)numParams;
  return cuCtxCreate_v2(pctx, flags, dev);
}

// A green context is a context of its own to the mock (its resources are not simulated); it is not
// made current.
CUresult cuGreenCtxCreate(CUgreenCtx* phCtx, CUdevResourceDesc desc, CUdevice dev, unsigned int flags) {
  (void)desc;
  (void)flags;
  if (phCtx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUcontext current = t_current_context;
  CUcontext created = nullptr;
  const CUresult status = cuCtxCreate_v2(&created, 0, dev);
  t_current_context = current;
  if (status == CUDA_SUCCESS) *phCtx = reinterpret_cast<CUgreenCtx>(created);
  return status;
}

CUresult cuGreenCtxDestroy(CUgreenCtx hCtx) { return cuCtxDestroy_v2(reinterpret_cast<CUcontext>(hCtx)); }

CUresult cuCtxDestroy_v2(CUcontext ctx) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (!is_live(ctx) || ctx->primary) return CUDA_ERROR_INVALID_CONTEXT;
  destroy_context_locked(state, ctx);
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  if (ctx != nullptr && !is_live(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  t_current_context = ctx;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext* pctx) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = is_live(t_current_context) ? t_current_context : nullptr;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetId(CUcontext ctx, unsigned long long* ctxId) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  if (ctxId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* context = ctx;
  if (context == nullptr) {
    CUresult status = current_context(&context);
    if (status != CUDA_SUCCESS) return status;
  }
  if (!is_live(context)) return CUDA_ERROR_INVALID_CONTEXT;
  *ctxId = context->id;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice* device) {
  CUctx_st* context = nullptr;
  CUresult status = current_context(&context);
  if (status != CUDA_SUCCESS) return status;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *device = static_cast<CUdevice>(context->device);
  return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void) {
  CUctx_st* context = nullptr;
  CUresult status = current_context(&context);
  if (status != CUDA_SUCCESS) return status;
  driver().shared.wait_until(context->last_end_ns.load(std::memory_order_acquire));
  return CUDA_SUCCESS;
}

// CUDA 13: the context is named; null means the current one.
CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  if (ctx == nullptr) return cuCtxSynchronize();
  if (!is_live(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  driver().shared.wait_until(ctx->last_end_ns.load(std::memory_order_acquire));
  return CUDA_SUCCESS;
}

CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  CUctx_st* context = nullptr;
  CUresult status = current_context(&context);
  if (status != CUDA_SUCCESS) return status;
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  SharedState& shared = driver().shared;
  shared.reclaim_dead();  // a real card has already freed the memory of a killed process
  std::uint64_t device_total = shared.total_bytes(context->device);
  std::uint64_t used = std::min(device_total, shared.used_bytes(context->device));
  *total = device_total;
  *free = device_total - used;
  return CUDA_SUCCESS;
}

void gpuslice_mock_reset(void) {
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (state.phase.load(std::memory_order_relaxed) == static_cast<int>(Phase::Ready)) {
    forget_process_locked(state, true);
    state.shared.detach();
  }
  state.phase.store(static_cast<int>(Phase::Uninitialized), std::memory_order_release);
}

int gpuslice_mock_advance_clock_ns(unsigned long long ns) {
  if (check_ready() != CUDA_SUCCESS || !driver().shared.fake_clock()) return -1;
  driver().shared.advance_fake_clock(ns);
  return 0;
}

}  // extern "C"
