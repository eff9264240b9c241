#include "interposer/driver_ops.h"
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

bool real_device_processes(const char* uuid, nvmlProcessInfo_t* out, unsigned* count) {
  static auto nvml_init = REAL(nvmlInit_v2);
  static auto by_uuid = REAL_UNHOOKED(Nvml, nvmlDeviceGetHandleByUUID);
  static auto processes = REAL_UNHOOKED(Nvml, nvmlDeviceGetComputeRunningProcesses_v3);
  static bool nvml_ok =
      nvml_init != nullptr && by_uuid != nullptr && processes != nullptr && nvml_init() == NVML_SUCCESS;
  if (!nvml_ok) return false;
  nvmlDevice_t handle = nullptr;
  if (by_uuid(uuid, &handle) != NVML_SUCCESS) return false;
  const unsigned capacity = *count;
  if (processes(handle, count, out) != NVML_SUCCESS) return false;
  if (*count > capacity) *count = capacity;
  return true;
}

}  // namespace

DriverOps real_driver_ops() {
  return {.device_uuid = real_device_uuid,
          .device_total_mem = real_device_total_mem,
          .device_count = real_device_count,
          .current_device = real_current_device,
          .device_processes = real_device_processes,
          .ctx_synchronize = real_ctx_synchronize,
          .stream_synchronize = real_stream_synchronize,
          .stream_capture_status = stream_capture_status};
}

}  // namespace gpuslice::interposer
