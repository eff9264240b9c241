#include "interposer/gate_driver.h"

#include <atomic>
#include <new>

#include "interposer/driver_ops.h"
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

limiter::DriverOps gate_driver_ops() {
  const DriverOps& driver = driver_ops();
  limiter::DriverOps ops;
  ops.ctx_synchronize = driver.ctx_synchronize;
  ops.stream_synchronize = driver.stream_synchronize;
  ops.stream_is_capturing = driver.stream_capture_status;
  ops.ctx_id = driver.ctx_id;
  ops.event_create = driver.event_create;
  ops.event_record = driver.event_record;
  ops.event_synchronize = driver.event_synchronize;
  ops.event_elapsed_ns = driver.event_elapsed_ns;
  ops.event_query = driver.event_query;
  ops.stream_query = driver.stream_query;
  return ops;
}

}  // namespace gpuslice::interposer
