#include "interposer/gate_driver.h"

#include <atomic>
#include <new>

#include "interposer/hooks.h"

namespace gpuslice::interposer {

namespace {
std::atomic<Clock*> g_simulated_clock{nullptr};
}

Clock& gate_clock() {
  if (Clock* simulated = g_simulated_clock.load(std::memory_order_acquire)) return *simulated;
  static SystemClock* clock = new SystemClock();
  return *clock;
}

void set_gate_clock(Clock* clock) { g_simulated_clock.store(clock, std::memory_order_release); }

CUresult stream_capture_status(CUstream stream, int* status) {
  static auto real = REAL_UNHOOKED(Cuda, cuStreamIsCapturing);
  if (real == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  CUstreamCaptureStatus s = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult r = real(stream, &s);
  *status = static_cast<int>(s);
  return r;
}

}  // namespace gpuslice::interposer
