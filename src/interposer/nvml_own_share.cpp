// The container's share of a device's engines, from the driver's per-process samples.
#include "interposer/nvml_own_share.h"

#include "common/clock.h"
#include "interposer/hook_prologue.h"
#include "interposer/nvml_slice.h"

namespace gpuslice::interposer {
namespace {

// NVML's own filter: samples newer than now - 1 s.
constexpr unsigned long long kWindowUs = 1'000'000;

unsigned clamp_percent(unsigned long long v) { return v > 100 ? 100U : static_cast<unsigned>(v); }

}  // namespace

// Sums the container's per-process samples of the last second (each process's samples averaged);
// NVML_ERROR_NOT_SUPPORTED where the driver keeps no per-process samples.
nvmlReturn_t own_share(nvmlDevice_t device, OwnShare* share) {
  auto samples_of = REAL(nvmlDeviceGetProcessUtilization);
  if (samples_of == nullptr) return NVML_ERROR_NOT_SUPPORTED;
  NvmlList<nvmlProcessUtilizationSample_t> all;
  // NVML stamps samples with the CPU's realtime clock in microseconds.
  const unsigned long long now_us = gpuslice::realtime_ns() / 1000;
  const unsigned long long since = now_us > kWindowUs ? now_us - kWindowUs : 0;
  nvmlReturn_t r = all.fill([&](nvmlProcessUtilizationSample_t* buffer, unsigned* count) {
    return samples_of(device, buffer, count, since);
  });
  *share = OwnShare{};
  if (r == NVML_ERROR_NOT_FOUND) return NVML_SUCCESS;  // no process used the device in the last second
  if (r != NVML_SUCCESS)
    return r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_FUNCTION_NOT_FOUND ? NVML_ERROR_NOT_SUPPORTED : r;
  OwnPids own;
  own.collect();
  unsigned long long sum[4] = {};
  // Each own pid once (at its first sample), with the average of its samples.
  for (unsigned i = 0; i < all.size(); ++i) {
    const nvmlProcessUtilizationSample_t& s = all[i];
    if (!own.contains(s.pid)) continue;
    bool seen = false;
    for (unsigned j = 0; j < i && !seen; ++j) seen = all[j].pid == s.pid;
    if (seen) continue;
    unsigned long long process[4] = {};
    unsigned long long n = 0;
    for (unsigned j = i; j < all.size(); ++j) {
      if (all[j].pid != s.pid) continue;
      process[0] += all[j].smUtil;
      process[1] += all[j].memUtil;
      process[2] += all[j].encUtil;
      process[3] += all[j].decUtil;
      ++n;
    }
    for (int k = 0; k < 4; ++k) sum[k] += n == 0 ? 0 : process[k] / n;
  }
  *share =
      OwnShare{clamp_percent(sum[0]), clamp_percent(sum[1]), clamp_percent(sum[2]), clamp_percent(sum[3])};
  return NVML_SUCCESS;
}

}  // namespace gpuslice::interposer
