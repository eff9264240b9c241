// What the priority gate's containers tell each other (PeerView) and the board they do it through
// (PeerBoard: the node channel in the library, a fake in the simulator and the tests). Below both
// the gate (priority_gate.h) and its view of the others (peer_watch.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/priority.h"

namespace gpuslice::limiter {

// What one container publishes about itself on one GPU.
struct PeerView {
  Priority priority = Priority::Normal;
  std::uint64_t heartbeat_ns = 0;  // CLOCK_MONOTONIC of the publish
  // Work queued or running at least until then; a time already past: idle since then (a lower
  // priority's bound ramps up with that idle time); 0: never busy.
  std::uint64_t busy_until_ns = 0;
  std::uint64_t held_back_ns = 0;  // total time the container's launches were held back
  // The share of its busy time the device ran its work, per mille, from its own timing events
  // (0: not measured). Below the lower ones' light share it does not hold them.
  std::uint32_t device_share_permille = 0;
  // The mean length of its busy periods (from its first launch after idling to the wait that
  // found its work done: a server's request), 0 = unknown. Lower ones size their bound by it.
  std::uint64_t busy_period_ns = 0;
};

// The other containers on the same GPU, and this container's own record.
class PeerBoard {
 public:
  virtual ~PeerBoard() = default;
  // Records of the OTHER containers whose heartbeat is newer than now - stale_ns, at most
  // `capacity`: a full look (on the node channel, a scan of its directory). Must not allocate or
  // block for long: called from launching threads, one at a time.
  virtual std::size_t read_peers(PeerView* out, std::size_t capacity, std::uint64_t now_ns,
                                 std::uint64_t stale_ns) = 0;
  // read_peers() that may leave out records at or below `above` (the reader's own level), which
  // the gate does not look at, so that they cannot take the place of a higher one.
  virtual std::size_t read_peers_above(PeerView* out, std::size_t capacity, std::uint64_t now_ns,
                                       std::uint64_t stale_ns, Priority above) {
    static_cast<void>(above);
    return read_peers(out, capacity, now_ns, stale_ns);
  }
  // The same for the containers the last read_peers() found with a priority above `above` only,
  // as cheaply as the board can (on the node channel, one read per record kept open). A container
  // that appeared or rose above since is seen by the next read_peers().
  virtual std::size_t read_known_above(PeerView* out, std::size_t capacity, std::uint64_t now_ns,
                                       std::uint64_t stale_ns, Priority above) {
    static_cast<void>(above);
    return read_peers(out, capacity, now_ns, stale_ns);
  }
  // Replaces this container's record.
  virtual void publish(const PeerView& own) = 0;
};

}  // namespace gpuslice::limiter
