// The compute limit of this process: the launch hooks pass the gate of the current device's
// limiter before reaching the driver, host synchronisations tell it the queue drained, and the
// watcher publishes busy time and node-wide turns. Called only while some device has a compute
// limit (g_compute_active), so an unlimited process pays one predictable branch per launch.
#pragma once

#include <cstdint>

#include "abi/cuda_abi.h"
#include "interposer/runtime.h"

namespace gpuslice::interposer {

inline bool compute_active() { return g_compute_active.load(std::memory_order_relaxed); }

// `kernel`: what is launched (limiter::kernel_key; 0 = unknown), for the priority gate's costs.
void gate_launch(CUstream stream, std::uint64_t kernel = 0);
// After the driver took a launch that passed gate_launch() on this thread: the compute limit's busy
// probe records the event that ends the launch's device time (limiter/busy_probe.h).
void after_launch(CUstream stream);
// Before the application's own synchronisation waits (priorities: still busy while it waits), and
// after it returned: the device finished what was launched.
void note_sync_begin();
void note_host_sync();

namespace compute_gate {
// Watcher thread, every 100 ms: a limit set live turns the gate on; busy time and turns published.
void tick();
// At exit: charge outstanding work of every limiter.
void settle_at_exit();
// In a forked child: the limiters' measuring windows belonged to the parent.
void after_fork();
}  // namespace compute_gate

}  // namespace gpuslice::interposer
