#include "interposer/launch_gate.h"

#include <cinttypes>
#include <new>

#include "common/clock.h"
#include "common/log.h"
#include "interposer/hooks.h"
#include "interposer/runtime.h"
#include "limiter/compute_limiter.h"

namespace gpuslice::interposer {

namespace {
SystemClock& system_clock() {
  static SystemClock* clock = new SystemClock();  // never destroyed: launches may run during exit
  return *clock;
}

CUresult is_capturing(CUstream stream, int* status) {
  static auto real = REAL_UNHOOKED(Cuda, cuStreamIsCapturing);
  if (real == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  CUstreamCaptureStatus s = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult r = real(stream, &s);
  *status = static_cast<int>(s);
  return r;
}

// The limiter of a limited device, created on its first launch; null when the device is not limited.
limiter::ComputeLimiter* limiter_for(DeviceState& d) {
  limiter::ComputeLimiter* lim = d.limiter.load(std::memory_order_acquire);
  if (lim != nullptr) [[likely]]
    return lim;
  const std::atomic<std::uint32_t>* source = ledger()->compute_limit_source(d.ledger_dev);
  if (source == nullptr) return nullptr;
  limiter::DriverOps ops;
  ops.ctx_synchronize = REAL(cuCtxSynchronize);
  ops.stream_synchronize = REAL(cuStreamSynchronize);
  ops.stream_is_capturing = is_capturing;
  // The limit is read live from the shared state, so `gpuslice set --compute` applies at once.
  auto* fresh = new (std::nothrow)
      limiter::ComputeLimiter(system_clock(), ops, ledger()->compute_state(d.ledger_dev), source);
  if (fresh == nullptr) return nullptr;
  fresh->set_phase_source(&d.turn_offset);
  limiter::ComputeLimiter* expected = nullptr;
  if (d.limiter.compare_exchange_strong(expected, fresh, std::memory_order_acq_rel)) return fresh;
  delete fresh;
  return expected;
}

limiter::ComputeLimiter* current_limiter() {
  DeviceState* d = current_device_state();
  if (d == nullptr || d->ledger_dev < 0) return nullptr;
  return limiter_for(*d);
}
}  // namespace

void gate_launch(CUstream stream) {
  if (limiter::ComputeLimiter* lim = current_limiter()) lim->gate(stream);
}

void publish_compute_usage() {
  shm::Ledger* l = ledger();
  for (CUdevice dev = 0; dev < kMaxDevices; ++dev) {
    DeviceState* d = device_state_if_attached(dev);
    if (d == nullptr || d->ledger_dev < 0) continue;
    limiter::ComputeLimiter* lim = d->limiter.load(std::memory_order_acquire);
    if (lim == nullptr) continue;
    std::uint64_t busy = lim->stats().busy_ns;
    std::uint64_t published = d->busy_published.exchange(busy, std::memory_order_acq_rel);
    if (busy > published) l->add_busy_ns(d->ledger_dev, busy - published);
  }
}

void settle_limiters() {
  for (CUdevice dev = 0; dev < kMaxDevices; ++dev) {
    DeviceState* d = device_state_if_attached(dev);
    if (d == nullptr) continue;
    limiter::ComputeLimiter* lim = d->limiter.load(std::memory_order_acquire);
    if (lim == nullptr) continue;
    lim->settle();
    const limiter::Stats s = lim->stats();
    GS_LOG(Info,
           "compute limiter, device %d: %" PRIu64 " windows (%" PRIu64 " ended by a pause), %" PRIu64
           " drains, %.3f s busy, %.3f s held back",
           static_cast<int>(dev), s.windows, s.paused_windows, s.drains, static_cast<double>(s.busy_ns) / 1e9,
           static_cast<double>(s.throttled_ns) / 1e9);
  }
  publish_compute_usage();
}

void note_host_sync() {
  if (limiter::ComputeLimiter* lim = current_limiter()) lim->note_host_sync();
}

}  // namespace gpuslice::interposer
