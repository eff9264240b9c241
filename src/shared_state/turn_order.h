// Turns between compute-limited containers on one GPU. Containers whose kernels time-slice one GPU
// each charge wall time the other partly used, so uncoordinated limiters together give both less
// than their limits. Every container of the GPU orders the active ones (a limit strictly between
// 0 and 100 %, fresh record) by container key and takes its turn in a host-wide cycle at an offset
// equal to the sum of the limits of those before it. All inputs come from NodeChannel::read_peers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "shared_state/node_channel.h"

namespace gpuslice::shm {

inline constexpr std::uint64_t kNoTurn = ~0ULL;

// This container's offset within a cycle of `period_ns`, or kNoTurn when it is alone (or not itself
// limited), so no turns are needed. Peers with own_key are ignored (the caller's own record).
std::uint64_t turn_offset(std::uint64_t own_key, unsigned own_limit_percent, const PeerState* peers,
                          std::size_t count, std::uint64_t period_ns);

}  // namespace gpuslice::shm
