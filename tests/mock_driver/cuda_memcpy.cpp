// Copies and memsets of the simulated libcuda. Device memory is host memory, so a copy is a
// memmove and a memset a fill; the device side must be a live allocation (or accessible VMM
// mapping), as the driver checks. They take no device time. Synchronous ones wait for the
// context's queued kernels first, as on the legacy stream; asynchronous ones happen at once.
// Copies with a shape (2D, 3D) and peer copies between linear memory are modelled, arrays not.
#include <algorithm>
#include <cstdint>
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

// What a synchronous call waits for: the current context's queued kernels.
CUresult wait_for_context() {
  CUctx_st* context = nullptr;
  CUresult status = current_context(&context);
  if (status != CUDA_SUCCESS) return status;
  driver().shared.wait_until(context->last_end_ns.load(std::memory_order_acquire));
  return CUDA_SUCCESS;
}

// A memset: `height` rows of `width` elements `value`, one every `pitch` bytes (1D: one row).
template <class T>
CUresult fill(CUdeviceptr destination, std::size_t pitch, T value, std::size_t width, std::size_t height) {
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  const std::size_t row = width * sizeof(T);
  if (destination % sizeof(T) != 0 || (height > 1 && pitch < row)) return CUDA_ERROR_INVALID_VALUE;
  const std::size_t span = pitch * (height - 1) + row;
  Driver& state = driver();
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    if (!is_device_range_locked(state, static_cast<std::uintptr_t>(destination), span))
      return CUDA_ERROR_INVALID_VALUE;
  }
  auto* base = static_cast<unsigned char*>(as_pointer(destination));
  for (std::size_t y = 0; y < height; ++y) std::fill_n(reinterpret_cast<T*>(base + y * pitch), width, value);
  return CUDA_SUCCESS;
}

template <class T>
CUresult fill_sync(CUdeviceptr destination, std::size_t pitch, T value, std::size_t width,
                   std::size_t height) {
  const CUresult waited = wait_for_context();
  return waited != CUDA_SUCCESS ? waited : fill(destination, pitch, value, width, height);
}

template <class T>
CUresult fill_async(CUdeviceptr destination, std::size_t pitch, T value, std::size_t width,
                    std::size_t height, CUstream handle) {
  CUstream_st* stream = nullptr;
  const CUresult status = resolve_stream(handle, &stream);
  return status != CUDA_SUCCESS ? status : fill(destination, pitch, value, width, height);
}

// One side of a copy with a shape: where its (x, y, z) origin is and how its rows and slices lie.
struct Shape {
  CUmemorytype type;
  const void* host;
  CUdeviceptr device;
  std::size_t x, y, z, pitch, height;
};

CUresult shaped_copy(const Shape& from, const Shape& to, std::size_t width, std::size_t height,
                     std::size_t depth) {
  if (width == 0 || height == 0 || depth == 0) return CUDA_SUCCESS;
  auto side = [](const Shape& s) {
    return s.type == CU_MEMORYTYPE_HOST     ? Side::Host
           : s.type == CU_MEMORYTYPE_DEVICE ? Side::Device
                                            : Side::Either;
  };
  auto offset = [](const Shape& s, std::size_t row, std::size_t slice) {
    return s.x + (s.y + row) * s.pitch + (s.z + slice) * s.pitch * s.height;
  };
  for (const Shape* s : {&from, &to}) {
    if (s->type == CU_MEMORYTYPE_ARRAY) return CUDA_ERROR_NOT_SUPPORTED;  // arrays are not simulated
    if (s->type != CU_MEMORYTYPE_HOST && s->type != CU_MEMORYTYPE_DEVICE && s->type != CU_MEMORYTYPE_UNIFIED)
      return CUDA_ERROR_INVALID_VALUE;
    if ((height > 1 || depth > 1) && s->pitch < width) return CUDA_ERROR_INVALID_VALUE;
    if (depth > 1 && s->height < height) return CUDA_ERROR_INVALID_VALUE;
  }
  auto base = [](const Shape& s) {
    return static_cast<unsigned char*>(s.type == CU_MEMORYTYPE_HOST ? const_cast<void*>(s.host)
                                                                    : as_pointer(s.device));
  };
  unsigned char* source = base(from);
  unsigned char* destination = base(to);
  if (source == nullptr || destination == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& state = driver();
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    for (const Shape* s : {&from, &to}) {
      const std::size_t first = offset(*s, 0, 0);
      const std::size_t end = offset(*s, height - 1, depth - 1) + width;
      if (!side_ok(state, reinterpret_cast<std::uintptr_t>(base(*s) + first), end - first, side(*s)))
        return CUDA_ERROR_INVALID_VALUE;
    }
  }
  for (std::size_t slice = 0; slice < depth; ++slice) {
    for (std::size_t row = 0; row < height; ++row)
      std::memmove(destination + offset(to, row, slice), source + offset(from, row, slice), width);
  }
  return CUDA_SUCCESS;
}

CUresult copy_2d(const CUDA_MEMCPY2D* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return shaped_copy({p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY, 0, p->srcPitch, 0},
                     {p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY, 0, p->dstPitch, 0},
                     p->WidthInBytes, p->Height, 1);
}

template <class Copy3D>  // CUDA_MEMCPY3D and CUDA_MEMCPY3D_PEER name their shape alike
CUresult copy_3d(const Copy3D* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return shaped_copy({p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY, p->srcZ,
                      p->srcPitch, p->srcHeight},
                     {p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY, p->dstZ,
                      p->dstPitch, p->dstHeight},
                     p->WidthInBytes, p->Height, p->Depth);
}

// A synchronous or stream-ordered form of `run`.
template <class Run>
CUresult synchronous(Run run) {
  const CUresult waited = wait_for_context();
  return waited != CUDA_SUCCESS ? waited : run();
}
template <class Run>
CUresult on_stream(CUstream handle, Run run) {
  CUstream_st* stream = nullptr;
  const CUresult status = resolve_stream(handle, &stream);
  return status != CUDA_SUCCESS ? status : run();
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

CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  return fill_sync<unsigned char>(dstDevice, N * sizeof(unsigned char), uc, N, 1);
}

CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  return cuMemsetD8_v2(dstDevice, uc, N);
}

CUresult cuMemsetD16_v2(CUdeviceptr dstDevice, unsigned short us, size_t N) {
  return fill_sync<unsigned short>(dstDevice, N * sizeof(unsigned short), us, N, 1);
}

CUresult cuMemsetD16_v2_ptds(CUdeviceptr dstDevice, unsigned short us, size_t N) {
  return cuMemsetD16_v2(dstDevice, us, N);
}

CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  return fill_sync<unsigned int>(dstDevice, N * sizeof(unsigned int), ui, N, 1);
}

CUresult cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  return cuMemsetD32_v2(dstDevice, ui, N);
}

CUresult cuMemsetD2D8_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width,
                         size_t Height) {
  return fill_sync<unsigned char>(dstDevice, dstPitch, uc, Width, Height);
}

CUresult cuMemsetD2D8_v2_ptds(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width,
                              size_t Height) {
  return cuMemsetD2D8_v2(dstDevice, dstPitch, uc, Width, Height);
}

CUresult cuMemsetD2D16_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width,
                          size_t Height) {
  return fill_sync<unsigned short>(dstDevice, dstPitch, us, Width, Height);
}

CUresult cuMemsetD2D16_v2_ptds(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width,
                               size_t Height) {
  return cuMemsetD2D16_v2(dstDevice, dstPitch, us, Width, Height);
}

CUresult cuMemsetD2D32_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width,
                          size_t Height) {
  return fill_sync<unsigned int>(dstDevice, dstPitch, ui, Width, Height);
}

CUresult cuMemsetD2D32_v2_ptds(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width,
                               size_t Height) {
  return cuMemsetD2D32_v2(dstDevice, dstPitch, ui, Width, Height);
}

CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
  return fill_async<unsigned char>(dstDevice, N * sizeof(unsigned char), uc, N, 1, hStream);
}

CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
  return cuMemsetD8Async(dstDevice, uc, N, hStream);
}

CUresult cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream) {
  return fill_async<unsigned short>(dstDevice, N * sizeof(unsigned short), us, N, 1, hStream);
}

CUresult cuMemsetD16Async_ptsz(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream) {
  return cuMemsetD16Async(dstDevice, us, N, hStream);
}

CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream) {
  return fill_async<unsigned int>(dstDevice, N * sizeof(unsigned int), ui, N, 1, hStream);
}

CUresult cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream) {
  return cuMemsetD32Async(dstDevice, ui, N, hStream);
}

CUresult cuMemsetD2D8Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width,
                           size_t Height, CUstream hStream) {
  return fill_async<unsigned char>(dstDevice, dstPitch, uc, Width, Height, hStream);
}

CUresult cuMemsetD2D8Async_ptsz(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width,
                                size_t Height, CUstream hStream) {
  return cuMemsetD2D8Async(dstDevice, dstPitch, uc, Width, Height, hStream);
}

CUresult cuMemsetD2D16Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width,
                            size_t Height, CUstream hStream) {
  return fill_async<unsigned short>(dstDevice, dstPitch, us, Width, Height, hStream);
}

CUresult cuMemsetD2D16Async_ptsz(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width,
                                 size_t Height, CUstream hStream) {
  return cuMemsetD2D16Async(dstDevice, dstPitch, us, Width, Height, hStream);
}

CUresult cuMemsetD2D32Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width,
                            size_t Height, CUstream hStream) {
  return fill_async<unsigned int>(dstDevice, dstPitch, ui, Width, Height, hStream);
}

CUresult cuMemsetD2D32Async_ptsz(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width,
                                 size_t Height, CUstream hStream) {
  return cuMemsetD2D32Async(dstDevice, dstPitch, ui, Width, Height, hStream);
}

CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D* pCopy) {
  return synchronous([&] { return copy_2d(pCopy); });
}

CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D* pCopy) { return cuMemcpy2D_v2(pCopy); }

CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D* pCopy) {
  return synchronous([&] { return copy_2d(pCopy); });
}

CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D* pCopy) { return cuMemcpy2DUnaligned_v2(pCopy); }

CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D* pCopy) {
  return synchronous([&] { return copy_3d(pCopy); });
}

CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D* pCopy) { return cuMemcpy3D_v2(pCopy); }

CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* pCopy, CUstream hStream) {
  return on_stream(hStream, [&] { return copy_2d(pCopy); });
}

CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D* pCopy, CUstream hStream) {
  return cuMemcpy2DAsync_v2(pCopy, hStream);
}

CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D* pCopy, CUstream hStream) {
  return on_stream(hStream, [&] { return copy_3d(pCopy); });
}

CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D* pCopy, CUstream hStream) {
  return cuMemcpy3DAsync_v2(pCopy, hStream);
}

CUresult cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext /*dstContext*/, CUdeviceptr srcDevice,
                      CUcontext /*srcContext*/, size_t ByteCount) {
  return copy_sync(as_pointer(dstDevice), Side::Device, as_pointer(srcDevice), Side::Device, ByteCount);
}

CUresult cuMemcpyPeer_ptds(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                           CUcontext srcContext, size_t ByteCount) {
  return cuMemcpyPeer(dstDevice, dstContext, srcDevice, srcContext, ByteCount);
}

CUresult cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext /*dstContext*/, CUdeviceptr srcDevice,
                           CUcontext /*srcContext*/, size_t ByteCount, CUstream hStream) {
  return copy_async(as_pointer(dstDevice), Side::Device, as_pointer(srcDevice), Side::Device, ByteCount,
                    hStream);
}

CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                CUcontext srcContext, size_t ByteCount, CUstream hStream) {
  return cuMemcpyPeerAsync(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream);
}

CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER* pCopy) {
  return synchronous([&] { return copy_3d(pCopy); });
}

CUresult cuMemcpy3DPeer_ptds(const CUDA_MEMCPY3D_PEER* pCopy) { return cuMemcpy3DPeer(pCopy); }

CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER* pCopy, CUstream hStream) {
  return on_stream(hStream, [&] { return copy_3d(pCopy); });
}

CUresult cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER* pCopy, CUstream hStream) {
  return cuMemcpy3DPeerAsync(pCopy, hStream);
}

// Batched copies: each in stream order, its source and destination on either side. The checks of
// cuda.h: a stream that is not the legacy default one, attributes for every copy starting at the
// first, each with a source access order.
CUresult cuMemcpyBatchAsync_v2(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                               CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                               CUstream hStream) {
  if (dsts == nullptr || srcs == nullptr || sizes == nullptr || count == 0 || attrs == nullptr ||
      attrsIdxs == nullptr || numAttrs == 0 || numAttrs > count || attrsIdxs[0] != 0 || hStream == nullptr)
    return CUDA_ERROR_INVALID_VALUE;
  for (size_t a = 0; a < numAttrs; ++a) {
    if (attrs[a].srcAccessOrder == 0 || (a > 0 && attrsIdxs[a] <= attrsIdxs[a - 1]) || attrsIdxs[a] >= count)
      return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t i = 0; i < count; ++i) {
    const CUresult r =
        copy_async(as_pointer(dsts[i]), Side::Either, as_pointer(srcs[i]), Side::Either, sizes[i], hStream);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

CUresult cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                                    CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                                    CUstream hStream) {
  return cuMemcpyBatchAsync_v2(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream);
}

CUresult cuMemcpyBatchAsync(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                            CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs, size_t* failIdx,
                            CUstream hStream) {
  const CUresult r = cuMemcpyBatchAsync_v2(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream);
  if (r != CUDA_SUCCESS && failIdx != nullptr) *failIdx = SIZE_MAX;  // not one copy's fault
  return r;
}

CUresult cuMemcpyBatchAsync_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                                 CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                                 size_t* failIdx, CUstream hStream) {
  return cuMemcpyBatchAsync(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream);
}

// 3D batched copies between pointers (the simulated driver has no array storage: an array operand
// is not supported), extents in bytes, rows rowLength bytes apart (0: the width), slices
// layerHeight rows apart (0: the height).
CUresult cuMemcpy3DBatchAsync_v2(size_t numOps, CUDA_MEMCPY3D_BATCH_OP* opList, unsigned long long flags,
                                 CUstream hStream) {
  if (numOps == 0 || opList == nullptr || flags != 0 || hStream == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < numOps; ++i) {
    const CUDA_MEMCPY3D_BATCH_OP& op = opList[i];
    if (op.src.type != CU_MEMCPY_OPERAND_TYPE_POINTER || op.dst.type != CU_MEMCPY_OPERAND_TYPE_POINTER)
      return CUDA_ERROR_NOT_SUPPORTED;
    const CUextent3D& e = op.extent;
    if (e.width == 0 || e.height == 0 || e.depth == 0 || op.srcAccessOrder == 0)
      return CUDA_ERROR_INVALID_VALUE;
    const auto pitch = [&](const CUmemcpy3DOperand& o) {
      return o.op.ptr.rowLength ? o.op.ptr.rowLength : e.width;
    };
    const auto rows = [&](const CUmemcpy3DOperand& o) {
      return o.op.ptr.layerHeight ? o.op.ptr.layerHeight : e.height;
    };
    if (pitch(op.src) < e.width || pitch(op.dst) < e.width || rows(op.src) < e.height ||
        rows(op.dst) < e.height)
      return CUDA_ERROR_INVALID_VALUE;
    for (size_t z = 0; z < e.depth; ++z) {
      for (size_t y = 0; y < e.height; ++y) {
        const CUdeviceptr from = op.src.op.ptr.ptr + (z * rows(op.src) + y) * pitch(op.src);
        const CUdeviceptr to = op.dst.op.ptr.ptr + (z * rows(op.dst) + y) * pitch(op.dst);
        const CUresult r =
            copy_async(as_pointer(to), Side::Either, as_pointer(from), Side::Either, e.width, hStream);
        if (r != CUDA_SUCCESS) return r;
      }
    }
  }
  return CUDA_SUCCESS;
}

CUresult cuMemcpy3DBatchAsync_v2_ptsz(size_t numOps, CUDA_MEMCPY3D_BATCH_OP* opList, unsigned long long flags,
                                      CUstream hStream) {
  return cuMemcpy3DBatchAsync_v2(numOps, opList, flags, hStream);
}

CUresult cuMemcpy3DBatchAsync(size_t numOps, CUDA_MEMCPY3D_BATCH_OP* opList, size_t* failIdx,
                              unsigned long long flags, CUstream hStream) {
  const CUresult r = cuMemcpy3DBatchAsync_v2(numOps, opList, flags, hStream);
  if (r != CUDA_SUCCESS && failIdx != nullptr) *failIdx = SIZE_MAX;
  return r;
}

CUresult cuMemcpy3DBatchAsync_ptsz(size_t numOps, CUDA_MEMCPY3D_BATCH_OP* opList, size_t* failIdx,
                                   unsigned long long flags, CUstream hStream) {
  return cuMemcpy3DBatchAsync(numOps, opList, failIdx, flags, hStream);
}

// Stream memory operations: a 32- or 64-bit value written to device memory in stream order (the
// simulated streams run at once); a batch of writes (waits, flushes and barriers have nothing to
// wait for here: the simulated device has no other writer).
CUresult cuStreamWriteValue32_v2(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  if (flags > 1) return CUDA_ERROR_INVALID_VALUE;  // CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER at most
  return fill_async<cuuint32_t>(addr, sizeof(cuuint32_t), value, 1, 1, stream);
}

CUresult cuStreamWriteValue32_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                      unsigned int flags) {
  return cuStreamWriteValue32_v2(stream, addr, value, flags);
}

CUresult cuStreamWriteValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  return cuStreamWriteValue32_v2(stream, addr, value, flags);
}

CUresult cuStreamWriteValue32_ptsz(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  return cuStreamWriteValue32_v2(stream, addr, value, flags);
}

CUresult cuStreamWriteValue64_v2(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  if (flags > 1) return CUDA_ERROR_INVALID_VALUE;
  return fill_async<cuuint64_t>(addr, sizeof(cuuint64_t), value, 1, 1, stream);
}

CUresult cuStreamWriteValue64_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                      unsigned int flags) {
  return cuStreamWriteValue64_v2(stream, addr, value, flags);
}

CUresult cuStreamWriteValue64(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  return cuStreamWriteValue64_v2(stream, addr, value, flags);
}

CUresult cuStreamWriteValue64_ptsz(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  return cuStreamWriteValue64_v2(stream, addr, value, flags);
}

CUresult cuStreamBatchMemOp_v2(CUstream stream, unsigned int count, CUstreamBatchMemOpParams* paramArray,
                               unsigned int flags) {
  if (count == 0 || count > 256 || paramArray == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned int i = 0; i < count; ++i) {
    const auto& op = paramArray[i];
    CUresult r = CUDA_SUCCESS;
    switch (op.operation) {
      case CU_STREAM_MEM_OP_WRITE_VALUE_32:
        r = cuStreamWriteValue32_v2(stream, op.writeValue.address, op.writeValue.value, op.writeValue.flags);
        break;
      case CU_STREAM_MEM_OP_WRITE_VALUE_64:
        r = cuStreamWriteValue64_v2(stream, op.writeValue.address, op.writeValue.value64,
                                    op.writeValue.flags);
        break;
      case CU_STREAM_MEM_OP_WAIT_VALUE_32:
      case CU_STREAM_MEM_OP_WAIT_VALUE_64:
      case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
      case CU_STREAM_MEM_OP_BARRIER:
        break;
      default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

CUresult cuStreamBatchMemOp_v2_ptsz(CUstream stream, unsigned int count, CUstreamBatchMemOpParams* paramArray,
                                    unsigned int flags) {
  return cuStreamBatchMemOp_v2(stream, count, paramArray, flags);
}

CUresult cuStreamBatchMemOp(CUstream stream, unsigned int count, CUstreamBatchMemOpParams* paramArray,
                            unsigned int flags) {
  return cuStreamBatchMemOp_v2(stream, count, paramArray, flags);
}

CUresult cuStreamBatchMemOp_ptsz(CUstream stream, unsigned int count, CUstreamBatchMemOpParams* paramArray,
                                 unsigned int flags) {
  return cuStreamBatchMemOp_v2(stream, count, paramArray, flags);
}

}  // extern "C"
