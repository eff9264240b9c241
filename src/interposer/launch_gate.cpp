#include "interposer/launch_gate.h"

#include "interposer/compute_limit.h"
#include "interposer/priority_sharing.h"
#include "interposer/reclaim/reclaim_engine.h"

namespace gpuslice::interposer {

LaunchTicket gate_launch(CUstream stream, std::uint64_t kernel) {
  // Priorities first: a held launch then meets the compute limit's ceiling with a fresh view.
  std::uint64_t waited_ns = 0;
  limiter::PriorityGate* gate = priority_sharing::before_launch(stream, kernel, &waited_ns);
  LaunchTicket ticket{compute_limit::before_launch(stream, waited_ns), nullptr};
  // Last: the share's pair must hold no wait of either gate.
  if (gate != nullptr && priority_sharing::time_launch(gate, stream)) ticket.share_timing = gate;
  // After every gate's wait: a move of borrowed memory holds only launches about to reach the driver.
  ticket.submitting = reclaim::enter_submission();
  return ticket;
}

void settle_ticket(const LaunchTicket& ticket, CUstream stream) {
  if (ticket.share_timing != nullptr) priority_sharing::after_timed_launch(ticket.share_timing, stream);
  if (ticket.probing != nullptr) compute_limit::after_probed_launch(ticket.probing, stream);
  if (ticket.submitting) reclaim::leave_submission();
}

void note_sync_begin() { priority_sharing::sync_begin(); }

void note_host_sync() {
  priority_sharing::sync_end();
  compute_limit::after_host_sync();
}

}  // namespace gpuslice::interposer
