#include "limiter/hold_trace.h"

namespace gpuslice::limiter {

void HoldTrace::end(std::uint64_t now, std::uint64_t hold_start) {
  if (!probing_) {
    GS_LOG(Debug, "priority gate: released at %llu us", static_cast<unsigned long long>(now / 1000));
    return;
  }
  if (queue_done_ns_ != 0) {
    GS_LOG(Debug, "priority gate: released at %llu us, queued work done %llu us into the hold",
           static_cast<unsigned long long>(now / 1000),
           static_cast<unsigned long long>((queue_done_ns_ - hold_start) / 1000));
  } else {
    GS_LOG(Debug, "priority gate: released at %llu us, queued work still running",
           static_cast<unsigned long long>(now / 1000));
  }
  bound_.end_queue_probe();
}

}  // namespace gpuslice::limiter
