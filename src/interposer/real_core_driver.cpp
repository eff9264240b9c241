#include "interposer/core_driver.h"
#include "interposer/gate_driver.h"
#include "interposer/hooks.h"

namespace gpuslice::interposer {
namespace {

CUresult real_device_uuid(CUuuid* uuid, CUdevice dev) {
  static auto fn = REAL_UNHOOKED(Cuda, cuDeviceGetUuid);
  return fn == nullptr ? CUDA_ERROR_NOT_INITIALIZED : fn(uuid, dev);
}

CUresult real_device_total_mem(std::size_t* bytes, CUdevice dev) {
  auto fn = REAL(cuDeviceTotalMem_v2);
  return fn == nullptr ? CUDA_ERROR_NOT_INITIALIZED : fn(bytes, dev);
}

CUresult real_device_count(int* count) {
  static auto fn = REAL_UNHOOKED(Cuda, cuDeviceGetCount);
  return fn == nullptr ? CUDA_ERROR_NOT_INITIALIZED : fn(count);
}

CUresult real_current_device(CUdevice* dev) {
  static auto fn = REAL_UNHOOKED(Cuda, cuCtxGetDevice);
  return fn == nullptr ? CUDA_ERROR_NOT_INITIALIZED : fn(dev);
}

CUresult real_ctx_synchronize() {
  auto fn = REAL(cuCtxSynchronize);
  return fn == nullptr ? CUDA_ERROR_NOT_INITIALIZED : fn();
}

CUresult real_stream_synchronize(CUstream stream) {
  auto fn = REAL(cuStreamSynchronize);
  return fn == nullptr ? CUDA_ERROR_NOT_INITIALIZED : fn(stream);
}

// The driver's own functions, never the hooks: the gate's events are not the application's work.
CUresult real_ctx_id(std::uint64_t* id) {
  static auto current = REAL_UNHOOKED(Cuda, cuCtxGetCurrent);
  static auto get_id = REAL_UNHOOKED(Cuda, cuCtxGetId);
  if (current == nullptr || get_id == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  CUcontext ctx = nullptr;
  const CUresult r = current(&ctx);
  if (r != CUDA_SUCCESS) return r;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  unsigned long long value = 0;
  const CUresult got = get_id(ctx, &value);
  *id = value;
  return got;
}

CUresult real_event_create(CUevent* event) {
  static auto fn = REAL_UNHOOKED(Cuda, cuEventCreate);
  return fn == nullptr ? CUDA_ERROR_NOT_SUPPORTED : fn(event, 0);  // timing on: its elapsed time is read
}

CUresult real_event_record(CUevent event, CUstream stream) {
  static auto fn = REAL_UNHOOKED(Cuda, cuEventRecord);
  return fn == nullptr ? CUDA_ERROR_NOT_SUPPORTED : fn(event, stream);
}

CUresult real_event_synchronize(CUevent event) {
  static auto fn = REAL_UNHOOKED(Cuda, cuEventSynchronize);
  return fn == nullptr ? CUDA_ERROR_NOT_SUPPORTED : fn(event);
}

CUresult real_event_query(CUevent event) {
  static auto fn = REAL_UNHOOKED(Cuda, cuEventQuery);
  return fn == nullptr ? CUDA_ERROR_NOT_SUPPORTED : fn(event);
}

CUresult real_stream_query(CUstream stream) {
  static auto fn = REAL_UNHOOKED(Cuda, cuStreamQuery);
  return fn == nullptr ? CUDA_ERROR_NOT_SUPPORTED : fn(stream);
}

CUresult real_event_elapsed_ns(CUevent start, CUevent end, std::uint64_t* ns) {
  using Elapsed = CUresult (*)(float*, CUevent, CUevent);
  static Elapsed fn = [] {
    auto v2 = REAL_UNHOOKED(Cuda, cuEventElapsedTime_v2);  // CUDA 12.8 and later
    return v2 != nullptr ? v2 : reinterpret_cast<Elapsed>(real_unhooked(Library::Cuda, "cuEventElapsedTime"));
  }();
  if (fn == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  float ms = 0;
  const CUresult r = fn(&ms, start, end);
  *ns = r == CUDA_SUCCESS && ms > 0 ? static_cast<std::uint64_t>(static_cast<double>(ms) * 1e6) : 0;
  return r;
}

CUresult real_device_attribute(int* value, CUdevice_attribute attr, CUdevice dev) {
  static auto fn = REAL_UNHOOKED(Cuda, cuDeviceGetAttribute);
  return fn == nullptr ? CUDA_ERROR_NOT_SUPPORTED : fn(value, attr, dev);
}

// A launch may pass a library's CUkernel cast to CUfunction (CUDA 12): asked as a kernel on the
// current device when the function query does not know it.
CUresult real_function_local_bytes(CUfunction f, int* bytes) {
  static auto fn = REAL_UNHOOKED(Cuda, cuFuncGetAttribute);
  static auto kernel = REAL_UNHOOKED(Cuda, cuKernelGetAttribute);
  CUresult r = fn == nullptr ? CUDA_ERROR_NOT_SUPPORTED : fn(bytes, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f);
  CUdevice dev = 0;
  if (r != CUDA_SUCCESS && kernel != nullptr && real_current_device(&dev) == CUDA_SUCCESS)
    r = kernel(bytes, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, reinterpret_cast<CUkernel>(f), dev);
  return r;
}

CUresult real_function_load(CUfunction f) {
  static auto fn = REAL_UNHOOKED(Cuda, cuFuncLoad);  // CUDA 12.4 and later
  return fn == nullptr ? CUDA_ERROR_NOT_SUPPORTED : fn(f);
}

CUresult real_graph_mem_attribute(CUdevice dev, CUgraphMem_attribute attr, std::uint64_t* value) {
  static auto fn = REAL_UNHOOKED(Cuda, cuDeviceGetGraphMemAttribute);
  if (fn == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  cuuint64_t figure = 0;
  const CUresult r = fn(dev, attr, &figure);
  *value = figure;
  return r;
}

CUresult real_graph_mem_trim(CUdevice dev) {
  auto fn = REAL(cuDeviceGraphMemTrim);
  return fn == nullptr ? CUDA_ERROR_NOT_SUPPORTED : fn(dev);
}

// NVML initialised once for the library's own reads (the application's nvmlInit/nvmlShutdown count
// separately: NVML keeps a reference count).
bool own_nvml() {
  static auto nvml_init = REAL(nvmlInit_v2);
  static bool ok = nvml_init != nullptr && nvml_init() == NVML_SUCCESS;
  return ok;
}

nvmlDevice_t real_nvml_device(const char* uuid) {
  static auto by_uuid = REAL_UNHOOKED(Nvml, nvmlDeviceGetHandleByUUID);
  nvmlDevice_t handle = nullptr;
  if (by_uuid == nullptr || !own_nvml() || by_uuid(uuid, &handle) != NVML_SUCCESS) return nullptr;
  return handle;
}

bool real_device_processes(const char* uuid, nvmlProcessInfo_t* out, unsigned* count) {
  static auto processes = REAL_UNHOOKED(Nvml, nvmlDeviceGetComputeRunningProcesses_v3);
  if (processes == nullptr) return false;
  nvmlDevice_t handle = real_nvml_device(uuid);
  if (handle == nullptr) return false;
  const unsigned capacity = *count;
  if (processes(handle, count, out) != NVML_SUCCESS) return false;
  if (*count > capacity) *count = capacity;
  return true;
}

bool real_sm_clock_mhz(nvmlDevice_t device, unsigned* mhz) {
  static auto clock_info = REAL_UNHOOKED(Nvml, nvmlDeviceGetClockInfo);
  constexpr int kClockSm = 1;  // NVML_CLOCK_SM
  return clock_info != nullptr && clock_info(device, kClockSm, mhz) == NVML_SUCCESS;
}

bool real_max_sm_clock_mhz(nvmlDevice_t device, unsigned* mhz) {
  static auto max_clock = REAL_UNHOOKED(Nvml, nvmlDeviceGetMaxClockInfo);
  constexpr int kClockSm = 1;  // NVML_CLOCK_SM
  return max_clock != nullptr && max_clock(device, kClockSm, mhz) == NVML_SUCCESS;
}

bool real_power_capped(nvmlDevice_t device) {
  using Reasons = nvmlReturn_t (*)(nvmlDevice_t, unsigned long long*);
  static Reasons reasons = [] {
    auto current = REAL_UNHOOKED(Nvml, nvmlDeviceGetCurrentClocksEventReasons);
    return current != nullptr ? current
                              : reinterpret_cast<Reasons>(real_unhooked(
                                    Library::Nvml, "nvmlDeviceGetCurrentClocksThrottleReasons"));
  }();
  constexpr unsigned long long kApplicationsClocks = 0x2;
  constexpr unsigned long long kSwPowerCap = 0x4;
  unsigned long long mask = 0;
  if (reasons == nullptr || reasons(device, &mask) != NVML_SUCCESS) return false;
  return (mask & kSwPowerCap) != 0 && (mask & kApplicationsClocks) == 0;
}

bool real_gpu_utilization(nvmlDevice_t device, unsigned* percent) {
  // The driver's figure, not the container view our own hook gives the application.
  static auto rates = REAL_UNHOOKED(Nvml, nvmlDeviceGetUtilizationRates);
  nvmlUtilization_t u{};
  if (rates == nullptr || rates(device, &u) != NVML_SUCCESS) return false;
  *percent = u.gpu;
  return true;
}

}  // namespace

CoreDriver real_core_driver() {
  return {.device_uuid = real_device_uuid,
          .device_total_mem = real_device_total_mem,
          .device_count = real_device_count,
          .current_device = real_current_device,
          .device_processes = real_device_processes,
          .nvml_device = real_nvml_device,
          .sm_clock_mhz = real_sm_clock_mhz,
          .gpu_utilization = real_gpu_utilization,
          .max_sm_clock_mhz = real_max_sm_clock_mhz,
          .power_capped = real_power_capped,
          .gates = {.ctx_synchronize = real_ctx_synchronize,
                    .stream_synchronize = real_stream_synchronize,
                    .stream_is_capturing = stream_capture_status,
                    .ctx_id = real_ctx_id,
                    .event_create = real_event_create,
                    .event_record = real_event_record,
                    .event_synchronize = real_event_synchronize,
                    .event_elapsed_ns = real_event_elapsed_ns,
                    .event_query = real_event_query,
                    .stream_query = real_stream_query},
          .device_attribute = real_device_attribute,
          .function_local_bytes = real_function_local_bytes,
          .function_load = real_function_load,
          .graph_mem_attribute = real_graph_mem_attribute,
          .graph_mem_trim = real_graph_mem_trim};
}

}  // namespace gpuslice::interposer
