// Priority sharing in the interposer (docs/priority.md): one limiter::PriorityGate per device of
// this process, seeing the other containers on the GPU through the node channel (node_presence.h).
// Active once the container has a level (GPUSLICE_PRIORITY, or `gpuslice set --priority` later), or
// when it asks for none, once the operator assigned it one (node_presence::assigned_default()); the
// gate reads the level live from the ledger, like the compute limit.
#pragma once

#include <cstdint>

#include "abi/cuda_abi.h"
#include "config/priority.h"
#include "limiter/priority_gate.h"
#include "shared_state/assignment_text.h"

namespace gpuslice::interposer::priority_sharing {

// Launch gate, before the compute limit: may hold the thread or wait for queued work (how long, in
// *waited_ns; 0 when it did not). Returns the device's gate (null: none), for time_launch().
limiter::PriorityGate* before_launch(CUstream stream, std::uint64_t kernel, std::uint64_t* waited_ns);
// Launch gate, after every gate let the launch go: whether `gate` times it for the container's
// device share; then after_timed_launch() once the driver took it, on this thread.
bool time_launch(limiter::PriorityGate* gate, CUstream stream);
void after_timed_launch(limiter::PriorityGate* timing, CUstream stream);
// Launch gate, around an application's host synchronisation.
void sync_begin();
void sync_end();

// The gate's tuning from the container's own GPUSLICE_PRIORITY_* and the operator's assignment: what
// would make it yield less than the defaults is capped by the assignment (floor=, light-share=).
limiter::PriorityTuning tuning_from(const config::PriorityTunables& own, const shm::Assignment& assigned);

// Whether the container has a level (then the launch gate is on). Called at start and by tick().
bool refresh();
// Watcher thread, every 100 ms: a level set live turns the launch gate on; opens each device's
// gate once the device is attached, then publishes a heartbeat and the time held back.
void tick();
// At exit: publish idle, log the statistics.
void settle_at_exit();
// In a forked child: the gates' state (a drain in progress on another thread) was the parent's;
// the watcher makes new ones.
void after_fork();

}  // namespace gpuslice::interposer::priority_sharing
