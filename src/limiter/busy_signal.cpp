#include "limiter/busy_signal.h"

#include <algorithm>

namespace gpuslice::limiter {
namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

}  // namespace

void BusySignal::note_launch_begins(std::uint64_t now) {
  if (sync_return_ns_.load(kRelaxed) == 0) return;
  const std::uint64_t returned = sync_return_ns_.exchange(0, kRelaxed);
  if (returned != 0) grace_pays_.store(now - std::min(now, returned) < timing_.resume_grace_ns, kRelaxed);
}

// Only a change is published: the record then says busy for a horizon, renewed when half is left.
bool BusySignal::note_busy(std::uint64_t now) {
  if (period_start_ns_.load(kRelaxed) == 0) period_start_ns_.store(now, kRelaxed);
  const std::uint64_t until = busy_until_ns_.load(kRelaxed);
  if (until >= now + timing_.busy_horizon_ns / 2) return false;
  busy_until_ns_.store(now + timing_.busy_horizon_ns, kRelaxed);
  return true;
}

bool BusySignal::note_sync_begin(std::uint64_t now, bool announces) {
  sync_begin_ns_.store(now, kRelaxed);
  if (!announces) return false;
  // Only work this container launched keeps it busy while it waits; an idle sync says nothing (nor
  // does one in the grace after a wait, when nothing was launched since).
  const std::uint64_t until = busy_until_ns_.load(kRelaxed);
  if (until <= now || until >= now + timing_.sync_lease_ns / 2) return false;
  if (until == grace_until_ns_.load(kRelaxed)) return false;
  busy_until_ns_.store(now + timing_.sync_lease_ns, kRelaxed);
  return true;
}

bool BusySignal::idle_since_sync_began() const {
  return last_launch_ns_.load(kRelaxed) <= sync_begin_ns_.load(kRelaxed);
}

bool BusySignal::note_sync_return(std::uint64_t now, bool announces) {
  const bool period_moved = note_period_end(now, announces);
  const std::uint64_t until = busy_until_ns_.load(kRelaxed);
  // Published as is: once past, it tells lower priorities since when this container is idle.
  sync_return_ns_.store(now, kRelaxed);
  const std::uint64_t idle_at = now + (grace_pays_.load(kRelaxed) ? timing_.resume_grace_ns : 0);
  if (until <= idle_at) return period_moved;  // already idle, or idle within the grace
  grace_until_ns_.store(idle_at, kRelaxed);
  busy_until_ns_.store(idle_at, kRelaxed);
  return true;
}

// A wait found this container's work done: the busy period its first launch after the previous one
// began has ended. Its moving mean (weight 1/4) is what lower ones size their bound by; true when it
// moved by more than 1/8, so the record is worth re-publishing now rather than at the heartbeat.
bool BusySignal::note_period_end(std::uint64_t now, bool announces) {
  const std::uint64_t start = period_start_ns_.exchange(0, kRelaxed);
  if (start == 0 || start >= now || !announces) return false;
  const std::uint64_t period = now - start;
  const std::uint64_t mean = busy_period_ns_.load(kRelaxed);
  const std::uint64_t next = mean == 0 ? period : mean - mean / 4 + period / 4;
  busy_period_ns_.store(next, kRelaxed);
  const std::uint64_t moved = next > mean ? next - mean : mean - next;
  return mean == 0 || moved > mean / 8;
}

}  // namespace gpuslice::limiter
