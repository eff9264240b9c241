// The device's own record of when this process's kernels ran, for compute_accuracy.py's GPU-time
// verdict: CUPTI's concurrent-kernel activity (start and end of every kernel, CUDA-graph nodes and
// cluster launches included, timed by the GPU) gathered into busy time per bin of host time.
// Loaded with ctypes by the measured process; no dependency of the library itself.
//
//   kt_start()                  before the first CUDA call: 0 or the CUptiResult that failed
//   kt_now()                    CUPTI's clock now, ns (the kernels' timestamps are on it)
//   kt_bins(origin, width, n, out)  flushes, then out[i] = ns of [origin + i*width, +width) during
//                               which at least one kernel ran (overlapping kernels count once)
//   kt_kernels()                kernels recorded; kt_dropped(): records CUPTI dropped
#include <cupti.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <utility>
#include <vector>

namespace {

constexpr std::size_t kBufferBytes = 8U << 20U;
constexpr std::size_t kAlign = 8;

std::mutex g_mutex;
std::vector<std::pair<std::uint64_t, std::uint64_t>> g_kernels;  // (start, end), CUPTI ns
std::uint64_t g_dropped = 0;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kAlign, kBufferBytes));
  *size = *buffer == nullptr ? 0 : kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext /*ctx*/, uint32_t stream_id, uint8_t* buffer, size_t /*size*/,
                               size_t valid) {
  CUpti_Activity* record = nullptr;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> found;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || record->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const auto* kernel = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      if (kernel->end > kernel->start) found.emplace_back(kernel->start, kernel->end);
    }
  }
  size_t dropped = 0;
  cuptiActivityGetNumDroppedRecords(nullptr, stream_id, &dropped);
  std::free(buffer);
  const std::lock_guard<std::mutex> lock(g_mutex);
  g_kernels.insert(g_kernels.end(), found.begin(), found.end());
  g_dropped += dropped;
}

}  // namespace

extern "C" {

int kt_start() {
  CUptiResult rc = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
  if (rc != CUPTI_SUCCESS) return static_cast<int>(rc);
  rc = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  return static_cast<int>(rc);
}

std::uint64_t kt_now() {
  std::uint64_t now = 0;
  cuptiGetTimestamp(&now);
  return now;
}

int kt_bins(std::uint64_t origin, std::uint64_t width, std::uint32_t count, std::uint64_t* out) {
  const CUptiResult rc = cuptiActivityFlushAll(1);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> kernels;
  {
    const std::lock_guard<std::mutex> lock(g_mutex);
    kernels = g_kernels;
  }
  std::sort(kernels.begin(), kernels.end());
  std::fill(out, out + count, 0);
  if (width == 0) return static_cast<int>(rc);
  const std::uint64_t limit = origin + width * count;
  // Merge overlapping kernels into busy intervals, then spread each over the bins it touches.
  std::size_t i = 0;
  while (i < kernels.size()) {
    std::uint64_t start = kernels[i].first;
    std::uint64_t end = kernels[i].second;
    for (++i; i < kernels.size() && kernels[i].first <= end; ++i) end = std::max(end, kernels[i].second);
    start = std::max(start, origin);
    end = std::min(end, limit);
    while (start < end) {
      const std::uint64_t bin = (start - origin) / width;
      const std::uint64_t bin_end = std::min(end, origin + (bin + 1) * width);
      out[bin] += bin_end - start;
      start = bin_end;
    }
  }
  return static_cast<int>(rc);
}

std::uint64_t kt_kernels() {
  const std::lock_guard<std::mutex> lock(g_mutex);
  return g_kernels.size();
}

std::uint64_t kt_dropped() {
  const std::lock_guard<std::mutex> lock(g_mutex);
  return g_dropped;
}

}  // extern "C"
