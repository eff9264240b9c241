// One policy of the priority gate (priority_gate.h): how much of its busy time a container's
// kernels keep the device busy, measured on the device's own timeline, so that lower priorities
// are held only by a container whose work occupies the GPU (a graph replay, a device-bound
// server) and not by a host-bound one (an eager server launching small kernels between Python
// work, the device idle most of its request): beside that one they only keep their queued work
// within the in-flight bound.
//
// The share is measured only while lower containers hold for this one. Beside a lower one that
// runs free, every kernel of this one waits for the driver's time slice of the other's work, so its
// events would time that wait as its own busy time (an eager server measured 18% held, 51-55% beside
// a free trainer on an H200, and flipped between light and not). So a measured share is trusted
// for `ttl_ns`; then the published share goes back to 0 (not measured: lower ones hold again) and,
// `settle_ns` later, once their queued work has drained, the next span is measured.
//
// A span: a BusyProbe times the container's launches (up to 128 of any thread, 5 ms) from its
// first launch after the measuring window opens, and a host synchronisation of the application
// that returns with nothing launched meanwhile (every event recorded before it has completed)
// reads it: its busy time over its host time is one sample. The share is a moving mean of the
// samples, the first taken as is; a rising sample weighs 1/2 (a server that turned device-bound
// holds lower ones again within a window or two), a falling one 1/4 (a host-bound server's prefill
// caught by one span does not make it look busier for long, and one light span does not release
// lower ones beside a device-bound server).
#pragma once

#include <atomic>
#include <cstdint>

#include "abi/cuda_abi.h"
#include "common/clock.h"
#include "limiter/busy_probe.h"
#include "limiter/driver_ops.h"

namespace gpuslice::limiter {

class DeviceShare {
 public:
  static constexpr std::uint32_t kPermille = 1000;

  struct Timing {
    std::uint64_t every_ns = 100'000'000;  // between spans while measuring
    std::uint64_t ttl_ns = 1'000'000'000;  // how long a measured share is trusted
    std::uint64_t settle_ns = 20'000'000;  // from the window's opening to its first span
  };

  explicit DeviceShare(const Timing& timing) : timing_(timing) {}
  DeviceShare(const DeviceShare&) = delete;
  DeviceShare& operator=(const DeviceShare&) = delete;

  // Whether the driver has timing events; without them nothing is measured (the share stays 0).
  static bool supported(const DriverOps& ops) { return BusyProbe::supported(ops); }

  // Before a launch on `stream` (any thread). True: the caller calls after_launch() on the same
  // thread once the driver took it. Not due: one relaxed load and a compare, plus a relaxed
  // increment of the launch count.
  bool before_launch(const DriverOps& ops, Clock& clock, CUstream stream, std::uint64_t now);
  void after_launch(const DriverOps& ops, Clock& clock, CUstream stream) {
    probe_.after_launch(ops, clock, stream);
  }

  // An application's synchronisation returned at `now` with nothing launched since it began: the
  // span, if one ran, is read. True when the published share changed.
  bool note_idle(const DriverOps& ops, std::uint64_t now);
  // The watcher's tick: once the measured share is `ttl_ns` old, the measuring window opens (the
  // published share goes to 0). True when the published share changed.
  bool tick(std::uint64_t now);

  // What lower containers are told: the measured share, 0 while measuring (or never measured).
  std::uint32_t permille() const {
    return measuring_.load(std::memory_order_acquire) ? 0 : mean_.load(kRelaxed);
  }
  // The measured share (0: never measured), for the exit line.
  std::uint32_t measured_permille() const { return mean_.load(kRelaxed); }

 private:
  static constexpr auto kRelaxed = std::memory_order_relaxed;

  Timing timing_;
  BusyProbe probe_;
  std::atomic<std::uint32_t> launches_{0};
  std::atomic<bool> measuring_{true};      // the window is open: lower ones hold, spans may start
  std::atomic<std::uint64_t> next_ns_{0};  // the next span may start from then (never while trusted)
  std::atomic<std::uint64_t> trusted_until_ns_{0};
  std::atomic<bool> armed_{false};  // a span is armed or running, not yet read
  std::atomic<std::uint32_t> mean_{0};
};

}  // namespace gpuslice::limiter
