// The launch hooks' one entry (launch.cpp, sync_hook.h): while the launch flag is on
// (launch_flag.h), each kernel or graph launch passes priority sharing, then the compute limit,
// before reaching the driver; host synchronisations tell both.
#pragma once

#include <cstdint>

#include "abi/cuda_abi.h"
#include "interposer/launch_flag.h"

namespace gpuslice::limiter {
class ComputeLimiter;
class PriorityGate;
}  // namespace gpuslice::limiter

namespace gpuslice::interposer {

// What a launch that passed the gate still owes after the driver took it: the closing timing
// event of the compute limiter's busy probe, or of priority sharing's device share, or nothing.
// Handed back by the hook rather than kept in a thread-local, so an untimed launch pays a compare
// after the driver call.
struct LaunchTicket {
  limiter::ComputeLimiter* probing = nullptr;
  limiter::PriorityGate* share_timing = nullptr;
  bool submitting = false;  // counted by reclaim (reclaim_engine.h): a move waits for it
  bool owed() const { return probing != nullptr || share_timing != nullptr || submitting; }
};

// `kernel`: what is launched (limiter::kernel_key; 0 = unknown), for priority sharing's costs.
LaunchTicket gate_launch(CUstream stream, std::uint64_t kernel = 0);
// After the driver took a launch that gate_launch() returned `ticket` for, on the same thread.
void settle_ticket(const LaunchTicket& ticket, CUstream stream);
inline void after_launch(const LaunchTicket& ticket, CUstream stream) {
  if (ticket.owed()) [[unlikely]]
    settle_ticket(ticket, stream);
}
// Before the application's own synchronisation waits (priorities: still busy while it waits), and
// after it returned: the device finished what was launched.
void note_sync_begin();
void note_host_sync();

}  // namespace gpuslice::interposer
