// Priority sharing in the interposer (docs/priority.md): one limiter::PriorityGate per device of
// this process, talking to the other containers on the GPU through the node channel. Active only
// when this container set GPUSLICE_PRIORITY; the launch hooks reach it through the compute gate's
// single branch (g_compute_active), so a process without priority or limit pays nothing new.
#pragma once

#include <cstdint>
#include <string>

#include "abi/cuda_abi.h"
#include "config/settings.h"
#include "shared_state/node_channel.h"

namespace gpuslice::interposer {
struct DeviceState;
}  // namespace gpuslice::interposer

namespace gpuslice::interposer::priority_sharing {

// This container's priority (GPUSLICE_PRIORITY, or the ledger's level) is set: the gates run.
bool enabled();
void enable(unsigned priority_level);
// Watcher thread: follows the level stored in the ledger (gpuslice set --priority), enabling the
// gates when one appears. True when a level is set.
bool refresh_level();

// Launch hooks, before the compute limiter: may hold the thread or drain the queue.
void before_launch(CUstream stream, std::uint64_t kernel);
// Around an application's host synchronisation.
void sync_begin();
void sync_end();

// Watcher thread, every 100 ms: opens the device's channel and gate once the device is attached,
// then publishes a heartbeat. Sets d.turns to the same channel so that the turns use one record.
void tick(DeviceState& d, const config::Settings& settings, std::uint64_t container_key);
// What the turns' publish must keep of the record (priority, busy, held back).
void fill_record(const DeviceState& d, shm::PeerState& record);
// At exit: publish idle, log the statistics.
void settle_at_exit();
// In a forked child: the gates' state (a drain in progress on another thread) was the parent's;
// the watcher makes new ones.
void after_fork();

}  // namespace gpuslice::interposer::priority_sharing
