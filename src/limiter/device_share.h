// One policy of the priority gate (priority_gate.h): how much of its busy time a container's
// kernels keep the device busy, measured on the device's own timeline, so that lower priorities
// are held only by a container whose work occupies the GPU (a graph replay, a device-bound
// server) and not by a host-bound one (an eager server launching small kernels between Python
// work, the device idle most of its request): beside that one they only keep their queued work
// within the in-flight bound.
//
// Every `every_ns` while the container launches, a BusyProbe times a span of its launches (up to
// 128 of any thread, 5 ms); when a host synchronisation of the application returns with nothing
// launched meanwhile (every event recorded before it has completed), the span's busy time over
// its host time is one sample. The published share is a moving mean of the samples, the newest
// weighing 1/8 (a host-bound server's prefill caught by one span does not flip it), the first
// taken as is. Not measured (0) until the first sample.
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

  explicit DeviceShare(std::uint64_t every_ns) : every_ns_(every_ns) {}
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
  // span, if one ran, is read. True when the share changed enough to be published again (by a
  // twentieth, or across `threshold_permille`).
  bool note_idle(const DriverOps& ops, std::uint64_t now, std::uint32_t threshold_permille);

  std::uint32_t permille() const { return share_.load(std::memory_order_relaxed); }

 private:
  std::uint64_t every_ns_;
  BusyProbe probe_;
  std::atomic<std::uint32_t> launches_{0};
  std::atomic<std::uint64_t> next_ns_{0};  // the next span may start from then
  std::atomic<bool> armed_{false};         // a span is armed or running, not yet read
  std::atomic<std::uint32_t> share_{0};
};

}  // namespace gpuslice::limiter
