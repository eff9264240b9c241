// cuCtxSetLimit reservations of the simulated libcuda, as the real driver makes them: the malloc
// heap and the printf FIFO take their size, the stack takes the per-thread size times the device's
// resident-thread capacity (SMs x threads per SM), pending device-runtime launches a record each.
// A launch of a function whose local memory per thread exceeds the stack limit grows the stack
// first (the driver's automatic growth), and may fail for want of memory like any reservation.
#include "cuda_internal.h"

namespace gpuslice::mock {
namespace {

std::uint64_t resident_threads(const MockConfig& config) { return config.sm_count * config.threads_per_sm; }

// What a limit's value reserves beyond its default's reservation (part of the context footprint).
std::uint64_t reservation(const MockConfig& config, unsigned limit, std::uint64_t value) {
  if (value <= kDefaultLimits[limit]) return 0;
  const std::uint64_t extra = value - kDefaultLimits[limit];
  switch (limit) {
    case CU_LIMIT_STACK_SIZE:
      return extra * resident_threads(config);
    case CU_LIMIT_PRINTF_FIFO_SIZE:
    case CU_LIMIT_MALLOC_HEAP_SIZE:
      return extra;
    case CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT:
      return extra * kPendingLaunchBytes;
    default:
      return 0;  // the sync depth takes no memory of its own here
  }
}

std::uint64_t total_reservation(const MockConfig& config, const std::uint64_t (&values)[kLimitCount]) {
  std::uint64_t total = 0;
  for (unsigned limit = 0; limit < kLimitCount; ++limit) total += reservation(config, limit, values[limit]);
  return total;
}

}  // namespace

CUresult set_limit_locked(Driver& state, unsigned device, unsigned limit, std::uint64_t value) {
  DeviceLimits& limits = state.limits[device];
  std::uint64_t values[kLimitCount];
  for (unsigned i = 0; i < kLimitCount; ++i) values[i] = limits.value[i];
  values[limit] = value;
  const std::uint64_t wanted = total_reservation(state.config, values);
  if (wanted > limits.charged) {
    if (!state.shared.charge(device, wanted - limits.charged, false)) return CUDA_ERROR_OUT_OF_MEMORY;
  } else {
    state.shared.uncharge(device, limits.charged - wanted, false);
  }
  limits.charged = wanted;
  limits.value[limit] = value;
  if (limit == CU_LIMIT_STACK_SIZE) state.stack_limit[device].store(value, std::memory_order_release);
  return CUDA_SUCCESS;
}

void reset_limits_locked(Driver& state, unsigned device) {
  state.shared.uncharge(device, state.limits[device].charged, false);
  state.limits[device] = DeviceLimits{};
  state.stack_limit[device].store(kDefaultLimits[CU_LIMIT_STACK_SIZE], std::memory_order_release);
}

}  // namespace gpuslice::mock

using namespace gpuslice::mock;

extern "C" {

CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
  CUctx_st* context = nullptr;
  CUresult status = current_context(&context);
  if (status != CUDA_SUCCESS) return status;
  if (static_cast<unsigned>(limit) >= kLimitCount) return CUDA_ERROR_INVALID_VALUE;
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  return set_limit_locked(state, context->device, static_cast<unsigned>(limit), value);
}

CUresult cuCtxGetLimit(size_t* pvalue, CUlimit limit) {
  CUctx_st* context = nullptr;
  CUresult status = current_context(&context);
  if (status != CUDA_SUCCESS) return status;
  if (pvalue == nullptr || static_cast<unsigned>(limit) >= kLimitCount) return CUDA_ERROR_INVALID_VALUE;
  Driver& state = driver();
  std::lock_guard<std::mutex> lock(state.mutex);
  *pvalue = state.limits[context->device].value[limit];
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& state = driver();
  if (dev < 0 || static_cast<unsigned>(dev) >= state.shared.device_count()) return CUDA_ERROR_INVALID_DEVICE;
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *pi = static_cast<int>(state.config.sm_count);
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
      *pi = static_cast<int>(state.config.threads_per_sm);
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *pi = kMockSm / 10;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *pi = kMockSm % 10;
      return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;  // not simulated
}

CUresult cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction hfunc) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!is_live(hfunc)) return CUDA_ERROR_INVALID_HANDLE;
  if (attrib != CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES) return CUDA_ERROR_INVALID_VALUE;  // not simulated
  *pi = static_cast<int>(hfunc->local_bytes);
  return CUDA_SUCCESS;
}

CUresult cuFuncLoad(CUfunction function) {
  CUresult ready = check_ready();
  if (ready != CUDA_SUCCESS) return ready;
  if (!is_live(function) || !is_live(function->module) || !is_live(function->module->context))
    return CUDA_ERROR_INVALID_HANDLE;
  return load_function(function, function->module->context->device);
}

}  // extern "C"
