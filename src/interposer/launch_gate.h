// The launch hooks' one entry (launch.cpp, sync_hook.h): while the container takes part in priority
// sharing or some device has a compute limit (one flag, so an unlimited process pays one
// predictable branch per launch), each kernel or graph launch passes priority sharing, then the
// compute limit, before reaching the driver; host synchronisations tell both.
#pragma once

#include <atomic>
#include <cstdint>

#include "abi/cuda_abi.h"

namespace gpuslice::limiter {
class ComputeLimiter;
class PriorityGate;
}  // namespace gpuslice::limiter

namespace gpuslice::interposer {

extern std::atomic<bool> g_launch_gated;

inline bool launch_gated() { return g_launch_gated.load(std::memory_order_relaxed); }

// What a launch that passed the gate still owes after the driver took it: the closing timing
// event of the compute limiter's busy probe, or of priority sharing's device share, or nothing.
// Handed back by the hook rather than kept in a thread-local, so an untimed launch pays a compare
// after the driver call.
struct LaunchTicket {
  limiter::ComputeLimiter* probing = nullptr;
  limiter::PriorityGate* share_timing = nullptr;
  bool owed() const { return probing != nullptr || share_timing != nullptr; }
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

namespace launch_gate {
// A feature that needs the launches from now on (a limit or a level set at start or live) turns the
// flag on; it stays on for the life of the process.
inline void turn_on() { g_launch_gated.store(true, std::memory_order_relaxed); }
}  // namespace launch_gate

}  // namespace gpuslice::interposer
