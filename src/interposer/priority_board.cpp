#include "interposer/priority_board.h"

#include <algorithm>
#include <limits>

namespace gpuslice::interposer {
namespace {

// Records converted per read; the gate asks for no more.
constexpr std::size_t kMaxRecords = 64;

void convert(const shm::PeerState* records, std::size_t count, limiter::PeerView* out) {
  for (std::size_t i = 0; i < count; ++i) {
    out[i].priority = records[i].priority;
    out[i].heartbeat_ns = records[i].heartbeat_ns;
    out[i].busy_until_ns = records[i].busy_until_ns;
    out[i].held_back_ns = records[i].held_back_ns;
    out[i].device_share_permille = records[i].device_share_permille;
    out[i].busy_period_ns = std::uint64_t{records[i].busy_period_us} * 1000;
  }
}

}  // namespace

std::size_t PresenceBoard::read_peers(limiter::PeerView* out, std::size_t capacity, std::uint64_t now_ns,
                                      std::uint64_t stale_ns) {
  shm::PeerState records[kMaxRecords];
  const std::size_t count =
      presence_.channel().scan_peers(records, std::min(capacity, kMaxRecords), now_ns, stale_ns);
  convert(records, count, out);
  return count;
}

void PresenceBoard::scan(std::uint64_t now_ns, std::uint64_t stale_ns, Priority above) {
  shm::PeerState records[kMaxRecords];
  presence_.channel().scan_peers(records, kMaxRecords, now_ns, stale_ns, above);
}

// The gate's full look: the files the watcher's last scan found, re-read now.
std::size_t PresenceBoard::read_peers_above(limiter::PeerView* out, std::size_t capacity,
                                            std::uint64_t now_ns, std::uint64_t stale_ns, Priority above) {
  return read_known_above(out, capacity, now_ns, stale_ns, above);
}

std::size_t PresenceBoard::read_known_above(limiter::PeerView* out, std::size_t capacity,
                                            std::uint64_t now_ns, std::uint64_t stale_ns, Priority above) {
  shm::PeerState records[kMaxRecords];
  const std::size_t count =
      presence_.channel().read_known_peers(records, std::min(capacity, kMaxRecords), now_ns, stale_ns, above);
  convert(records, count, out);
  return count;
}

void PresenceBoard::publish(const limiter::PeerView& own) {
  const std::uint64_t period_us =
      std::min<std::uint64_t>(own.busy_period_ns / 1000, std::numeric_limits<std::uint32_t>::max());
  presence_.publish_priority({own.priority, own.busy_until_ns, own.held_back_ns, own.device_share_permille,
                              static_cast<std::uint32_t>(period_us)},
                             own.heartbeat_ns);
}

}  // namespace gpuslice::interposer
