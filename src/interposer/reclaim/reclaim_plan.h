// Who gives back what (docs/quota.md, "Guarantees and borrowing"): from what the containers on a
// GPU publish on the reclaim board (reclaim_board.h), the bytes one borrowing process moves to host
// memory now. Pure: the same inputs give every borrower the same plan, so the borrowers act alone
// and together move no more than asked.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/priority.h"

namespace gpuslice::interposer::reclaim {

// A process holding borrowed memory on the GPU.
struct Holder {
  std::uint64_t container_key = 0;
  std::int32_t pid = 0;
  Priority priority = Priority::Normal;  // as believed (its operator's assignment applied)
  // What its container holds above its guarantee on the device: the most the container gives back.
  std::uint64_t above_guarantee = 0;
  std::uint64_t movable = 0;  // this process's borrowed allocations still on the device
};

// A process whose allocation waits for device memory.
struct Asker {
  std::uint64_t container_key = 0;
  Priority priority = Priority::Normal;  // as believed
  bool within_guarantee = false;         // its container stays within its guarantee with the allocation
  std::uint64_t wanted = 0;              // bytes its waiting allocations need
};

// Whether `asker` may have `holder`'s borrowed memory: never its own container's; a container within
// its guarantee from anyone borrowing, a higher level from a lower one.
bool may_ask(const Asker& asker, const Holder& holder);

// The bytes holders[self] gives back: what the askers entitled against it want beyond what the
// device has free, taken from the holders those askers may ask, lowest level first, then the
// container with the most above its guarantee, then the process with the most movable; a container
// never gives more than it holds above its guarantee, a process more than it has movable.
std::uint64_t share_of(const Holder* holders, std::size_t holder_count, std::size_t self, const Asker* askers,
                       std::size_t asker_count, std::uint64_t device_free);

}  // namespace gpuslice::interposer::reclaim
