// Copies of the simulated libcuda. Device memory is host memory, so a copy is a memmove; the
// device side must be a live allocation (or accessible VMM mapping), as the driver checks.
// Copies take no device time. Synchronous copies wait for the context's queued kernels first,
// as a copy on the legacy stream does; asynchronous ones happen at once.
#include <cstring>
#include <ctime>

#include "cuda_internal.h"

namespace gpuslice::mock {
namespace {

enum class Side { Host, Device, Either };

bool side_ok(Driver& state, std::uintptr_t address, std::size_t bytes, Side side) {
  switch (side) {
    case Side::Host:
      return true;
    case Side::Device:
      return is_device_range_locked(state, address, bytes);
    case Side::Either:
      // Unified addressing: whatever is not device memory is taken for host memory.
      return !is_device_address_locked(state, address) || is_device_range_locked(state, address, bytes);
  }
  return false;
}

CUresult copy(void* destination, Side destination_side, const void* source, Side source_side,
              std::size_t bytes) {
  if (bytes == 0) return CUDA_SUCCESS;
  if (destination == nullptr || source == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& state = driver();
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    if (!side_ok(state, reinterpret_cast<std::uintptr_t>(destination), bytes, destination_side) ||
        !side_ok(state, reinterpret_cast<std::uintptr_t>(source), bytes, source_side)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  std::memmove(destination, source, bytes);
  return CUDA_SUCCESS;
}

CUresult copy_sync(void* destination, Side destination_side, const void* source, Side source_side,
                   std::size_t bytes) {
  CUctx_st* context = nullptr;
  CUresult status = current_context(&context);
  if (status != CUDA_SUCCESS) return status;
  driver().shared.wait_until(context->last_end_ns.load(std::memory_order_acquire));
  return copy(destination, destination_side, source, source_side, bytes);
}

CUresult copy_async(void* destination, Side destination_side, const void* source, Side source_side,
                    std::size_t bytes, CUstream handle) {
  CUstream_st* stream = nullptr;
  CUresult status = resolve_stream(handle, &stream);
  if (status != CUDA_SUCCESS) return status;
  return copy(destination, destination_side, source, source_side, bytes);
}

void* as_pointer(CUdeviceptr address) {
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(address));
}

}  // namespace
}  // namespace gpuslice::mock

using namespace gpuslice::mock;

extern "C" {

CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount) {
  return copy_sync(as_pointer(dstDevice), Side::Device, srcHost, Side::Host, ByteCount);
}

CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount) {
  return cuMemcpyHtoD_v2(dstDevice, srcHost, ByteCount);
}

CUresult cuMemcpyDtoH_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  return copy_sync(dstHost, Side::Host, as_pointer(srcDevice), Side::Device, ByteCount);
}

CUresult cuMemcpyDtoH_v2_ptds(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  return cuMemcpyDtoH_v2(dstHost, srcDevice, ByteCount);
}

CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
  const CUresult copied =
      copy_sync(as_pointer(dstDevice), Side::Device, as_pointer(srcDevice), Side::Device, ByteCount);
  // GPUSLICE_MOCK_DTOD_BYTES_PER_S: the copy takes its time (real time, even under the fake clock),
  // the source read at its start: what is written to the source meanwhile is not in the copy.
  if (const std::uint64_t rate = driver().config.dtod_bytes_per_s; rate != 0 && copied == CUDA_SUCCESS) {
    const std::uint64_t ns = static_cast<std::uint64_t>(ByteCount) * 1'000'000'000ULL / rate;
    timespec ts{static_cast<time_t>(ns / 1'000'000'000ULL), static_cast<long>(ns % 1'000'000'000ULL)};
    nanosleep(&ts, nullptr);
  }
  return copied;
}

CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
  return cuMemcpyDtoD_v2(dstDevice, srcDevice, ByteCount);
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount,
                              CUstream hStream) {
  return copy_async(as_pointer(dstDevice), Side::Device, srcHost, Side::Host, ByteCount, hStream);
}

CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount,
                                   CUstream hStream) {
  return cuMemcpyHtoDAsync_v2(dstDevice, srcHost, ByteCount, hStream);
}

CUresult cuMemcpyDtoHAsync_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
  return copy_async(dstHost, Side::Host, as_pointer(srcDevice), Side::Device, ByteCount, hStream);
}

CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
  return cuMemcpyDtoHAsync_v2(dstHost, srcDevice, ByteCount, hStream);
}

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  return copy_sync(as_pointer(dst), Side::Either, as_pointer(src), Side::Either, ByteCount);
}

CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  return cuMemcpy(dst, src, ByteCount);
}

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
  return copy_async(as_pointer(dst), Side::Either, as_pointer(src), Side::Either, ByteCount, hStream);
}

CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
  return cuMemcpyAsync(dst, src, ByteCount, hStream);
}

}  // extern "C"
