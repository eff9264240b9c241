// The compute limit of this process (docs/compute-limiter.md): the launch gate passes each launch to the
// current device's limiter before it reaches the driver, and host synchronisations tell it the
// queue drained; the watcher publishes busy time and the node-wide turns.
#pragma once

#include "abi/cuda_abi.h"

namespace gpuslice::limiter {
class ComputeLimiter;
}

namespace gpuslice::interposer::compute_limit {

// Launch gate: the limiter of the current device, if it is limited, may hold the thread or drain.
// Returns the limiter whose busy probe times this launch (limiter/busy_probe.h), else null.
// `waited_ns`: how long priority sharing held the launch just before (ComputeLimiter::gate).
limiter::ComputeLimiter* before_launch(CUstream stream, std::uint64_t waited_ns);
// Launch gate: the driver took the launch before_launch() returned `probing` for, on this thread;
// the probe records the event that ends its device time.
void after_probed_launch(limiter::ComputeLimiter* probing, CUstream stream);
// Launch gate: the application's host synchronisation returned.
void after_host_sync();

// Watcher thread, every 100 ms: a limit set live turns the launch gate on; busy time and the
// container's turn among the compute-limited containers of each GPU are published.
void tick();
// At exit: charge outstanding work of every limiter.
void settle_at_exit();
// In a forked child: the limiters' measuring windows belonged to the parent.
void after_fork();

}  // namespace gpuslice::interposer::compute_limit
