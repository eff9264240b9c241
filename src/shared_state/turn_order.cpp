#include "shared_state/turn_order.h"

namespace gpuslice::shm {
namespace {

bool takes_turns(unsigned percent) { return percent > 0 && percent < 100; }

}  // namespace

std::uint64_t turn_offset(std::uint64_t own_key, unsigned own_limit_percent, const PeerState* peers,
                          std::size_t count, std::uint64_t period_ns) {
  if (!takes_turns(own_limit_percent)) return kNoTurn;
  std::uint64_t before = 0;
  unsigned active = 1;
  for (std::size_t i = 0; i < count; ++i) {
    const PeerState& peer = peers[i];
    if (peer.container_key == own_key || !takes_turns(peer.compute_limit_percent)) continue;
    ++active;
    if (peer.container_key < own_key) before += peer.compute_limit_percent;
  }
  if (active < 2) return kNoTurn;
  return (before % 100) * (period_ns / 100);
}

}  // namespace gpuslice::shm
