// The priority gate's view of the other containers (limiter::PeerBoard) through this container's
// presence on the node channel: the peers' records read from the channel, and the gate's own
// fields published in the container's one record. The listing of the node directory (scan()) is
// the watcher's: a launching thread only re-reads the record files the last scan kept open.
#pragma once

#include "interposer/node_presence.h"
#include "limiter/peer_board.h"

namespace gpuslice::interposer {

class PresenceBoard final : public limiter::PeerBoard {
 public:
  // `presence` must outlive the board.
  explicit PresenceBoard(NodePresence& presence) : presence_(presence) {}

  // Watcher thread, every tick: the full look at the node directory, keeping open the files of the
  // records believed above `above` (the gate's level) for the launching threads to re-read.
  void scan(std::uint64_t now_ns, std::uint64_t stale_ns, Priority above);

  // A scan of the channel that keeps the peers' record files open for read_known_above().
  std::size_t read_peers(limiter::PeerView* out, std::size_t capacity, std::uint64_t now_ns,
                         std::uint64_t stale_ns) override;
  std::size_t read_known_above(limiter::PeerView* out, std::size_t capacity, std::uint64_t now_ns,
                               std::uint64_t stale_ns, Priority above) override;
  std::size_t read_peers_above(limiter::PeerView* out, std::size_t capacity, std::uint64_t now_ns,
                               std::uint64_t stale_ns, Priority above) override;
  void publish(const limiter::PeerView& own) override;

 private:
  NodePresence& presence_;
};

}  // namespace gpuslice::interposer
