#include "limiter/peer_watch.h"

#include <algorithm>

#include "limiter/peer_board.h"

namespace gpuslice::limiter {
namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;
constexpr auto kAcquire = std::memory_order_acquire;
constexpr auto kRelease = std::memory_order_release;
constexpr auto kAcqRel = std::memory_order_acq_rel;

// Containers read per look; more than this many above one container on one GPU are not expected.
constexpr std::size_t kMaxPeers = 64;

}  // namespace

PeerWatch::Summary PeerWatch::cached() const {
  return Summary{higher_present_.load(kAcquire), higher_busy_until_ns_.load(kAcquire),
                 higher_period_ns_.load(kAcquire)};
}

PeerWatch::Summary PeerWatch::look(std::uint64_t now, bool force, Priority own) {
  std::uint64_t next = next_refresh_ns_.load(kRelaxed);
  const bool due = force || now >= next;
  if (!due || board_ == nullptr ||
      !next_refresh_ns_.compare_exchange_strong(next, now + timing_.refresh_ns, kAcqRel)) {
    return cached();
  }
  if (reading_.exchange(true, kAcquire)) {
    return cached();
  }
  PeerView records[kMaxPeers];
  std::size_t count = 0;
  const bool scan = now >= next_scan_ns_.load(kRelaxed);
  if (scan) {
    next_scan_ns_.store(now + timing_.absent_refresh_ns, kRelaxed);
    count = board_->read_peers_above(records, kMaxPeers, now, timing_.stale_ns, own);
    scans_.fetch_add(1, kRelaxed);
  } else {
    count = board_->read_known_above(records, kMaxPeers, now, timing_.stale_ns, own);
    rereads_.fetch_add(1, kRelaxed);
  }
  count = std::min(count, kMaxPeers);
  Summary summary;
  for (std::size_t i = 0; i < count; ++i) {
    const PeerView& peer = records[i];
    if (peer.heartbeat_ns + timing_.stale_ns < now) continue;
    if (static_cast<std::uint32_t>(peer.priority) <= static_cast<std::uint32_t>(own)) continue;
    summary.higher_present = true;
    if (peer.device_share_permille != 0 && peer.device_share_permille < timing_.light_share_permille)
      continue;
    // An honest peer never claims more than one sync lease plus a horizon past its publish
    // (which is not in the future).
    const std::uint64_t latest = std::min(peer.heartbeat_ns, now) + timing_.max_claim_ns;
    summary.higher_busy_until_ns =
        std::max(summary.higher_busy_until_ns, std::min(peer.busy_until_ns, latest));
    if (peer.busy_period_ns != 0 &&
        (summary.higher_period_ns == 0 || peer.busy_period_ns < summary.higher_period_ns))
      summary.higher_period_ns = peer.busy_period_ns;
  }
  higher_busy_until_ns_.store(summary.higher_busy_until_ns, kRelease);
  higher_period_ns_.store(summary.higher_period_ns, kRelease);
  higher_present_.store(summary.higher_present, kRelease);
  // Nobody above: nothing to re-read until the next full look.
  if (!summary.higher_present) next_refresh_ns_.store(next_scan_ns_.load(kRelaxed), kRelaxed);
  reading_.store(false, kRelease);
  return summary;
}

}  // namespace gpuslice::limiter
