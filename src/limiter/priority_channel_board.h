// The priority gate's view of the other containers through the node channel: records of peers
// read from it, and this container's record published to it with the fields other users of the
// record (the compute limiter's turns) own filled in from their sources.
#pragma once

#include <atomic>
#include <cstdint>

#include "limiter/priority_gate.h"
#include "shared_state/node_channel.h"

namespace gpuslice::limiter {

static_assert(static_cast<std::uint32_t>(Priority::Low) == static_cast<std::uint32_t>(shm::Priority::Low) &&
                  static_cast<std::uint32_t>(Priority::Normal) ==
                      static_cast<std::uint32_t>(shm::Priority::Normal) &&
                  static_cast<std::uint32_t>(Priority::High) ==
                      static_cast<std::uint32_t>(shm::Priority::High),
              "the gate's levels are the channel's");

class ChannelBoard final : public PeerBoard {
 public:
  // `compute_limit_source` (percent, may be null) is published with every record, so the turns of
  // compute-limited containers read the same record. Both must outlive the board.
  ChannelBoard(shm::NodeChannel& channel, const std::atomic<std::uint32_t>* compute_limit_source)
      : channel_(channel), compute_limit_source_(compute_limit_source) {}

  // A scan of the channel that keeps the peers' record files open for read_known_above().
  std::size_t read_peers(PeerView* out, std::size_t capacity, std::uint64_t now_ns,
                         std::uint64_t stale_ns) override;
  std::size_t read_known_above(PeerView* out, std::size_t capacity, std::uint64_t now_ns,
                               std::uint64_t stale_ns, Priority above) override;
  void publish(const PeerView& own) override;

  // The last record this board published, for another publisher of the same record (the turns'
  // heartbeat) to keep the priority fields.
  void fill_priority_fields(shm::PeerState& record) const;

 private:
  shm::NodeChannel& channel_;
  const std::atomic<std::uint32_t>* compute_limit_source_;
  std::atomic<std::uint32_t> last_priority_{static_cast<std::uint32_t>(Priority::Normal)};
  std::atomic<std::uint64_t> last_busy_until_ns_{0};
  std::atomic<std::uint64_t> last_held_back_ns_{0};
};

}  // namespace gpuslice::limiter
