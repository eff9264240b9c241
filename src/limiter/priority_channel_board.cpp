#include "limiter/priority_channel_board.h"

#include <algorithm>

namespace gpuslice::limiter {
namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;
// Records converted per read; the gate asks for no more.
constexpr std::size_t kMaxRecords = 64;

void convert(const shm::PeerState* records, std::size_t count, PeerView* out) {
  for (std::size_t i = 0; i < count; ++i) {
    const auto level = static_cast<std::uint32_t>(records[i].priority);
    out[i].priority =
        level <= static_cast<std::uint32_t>(Priority::High) ? static_cast<Priority>(level) : Priority::Normal;
    out[i].heartbeat_ns = records[i].heartbeat_ns;
    out[i].busy_until_ns = records[i].busy_until_ns;
    out[i].held_back_ns = records[i].held_back_ns;
  }
}

}  // namespace

std::size_t ChannelBoard::read_peers(PeerView* out, std::size_t capacity, std::uint64_t now_ns,
                                     std::uint64_t stale_ns) {
  shm::PeerState records[kMaxRecords];
  const std::size_t count = channel_.scan_peers(records, std::min(capacity, kMaxRecords), now_ns, stale_ns);
  convert(records, count, out);
  return count;
}

std::size_t ChannelBoard::read_known_above(PeerView* out, std::size_t capacity, std::uint64_t now_ns,
                                           std::uint64_t stale_ns, Priority above) {
  shm::PeerState records[kMaxRecords];
  const std::size_t count = channel_.read_known_peers(records, std::min(capacity, kMaxRecords), now_ns,
                                                      stale_ns, static_cast<shm::Priority>(above));
  convert(records, count, out);
  return count;
}

void ChannelBoard::publish(const PeerView& own) {
  last_priority_.store(static_cast<std::uint32_t>(own.priority), kRelaxed);
  last_busy_until_ns_.store(own.busy_until_ns, kRelaxed);
  last_held_back_ns_.store(own.held_back_ns, kRelaxed);
  shm::PeerState record;
  record.compute_limit_percent = compute_limit_source_ != nullptr ? compute_limit_source_->load(kRelaxed) : 0;
  record.priority = static_cast<shm::Priority>(own.priority);
  record.heartbeat_ns = own.heartbeat_ns;
  record.busy_until_ns = own.busy_until_ns;
  record.held_back_ns = own.held_back_ns;
  channel_.publish(record);
}

void ChannelBoard::fill_priority_fields(shm::PeerState& record) const {
  record.priority = static_cast<shm::Priority>(last_priority_.load(kRelaxed));
  record.busy_until_ns = last_busy_until_ns_.load(kRelaxed);
  record.held_back_ns = last_held_back_ns_.load(kRelaxed);
}

}  // namespace gpuslice::limiter
