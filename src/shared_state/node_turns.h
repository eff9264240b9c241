// Turns between containers on one GPU. Containers whose kernels time-slice one GPU each charge wall
// time the other partly used, so uncoordinated limiters together give both less than their limits.
// A small node-wide table per GPU (in GPUSLICE_NODE_DIR, shared by every container of the host)
// lists the compute-limited containers that are active; each takes its turn in a host-wide cycle at
// an offset equal to the sum of the limits of the containers listed before it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/result.h"

namespace gpuslice::shm {

inline constexpr std::uint64_t kNoTurn = ~0ULL;

struct TurnEntry {
  std::atomic<std::uint64_t> container;     // key of the container (its state file's identity); 0 = free
  std::atomic<std::uint64_t> heartbeat_ns;  // CLOCK_MONOTONIC of the last refresh
  std::atomic<std::uint32_t> limit_percent;
  std::uint32_t reserved;
};

struct TurnTable {
  static constexpr char kMagic[8] = {'G', 'S', 'T', 'U', 'R', 'N', 'S', '1'};
  static constexpr std::uint32_t kEntries = 64;
  char magic[8];
  std::uint32_t entries;
  std::uint32_t reserved;
  TurnEntry entry[kEntries];
};

class NodeTurns {
 public:
  // Opens (creating if needed) <dir>/turns-<uuid>; an existing file of another format is an error.
  static Result<std::unique_ptr<NodeTurns>> open(const std::string& dir, std::string_view gpu_uuid);
  ~NodeTurns();
  NodeTurns(const NodeTurns&) = delete;
  NodeTurns& operator=(const NodeTurns&) = delete;

  // Refreshes this container's entry and returns its offset within a cycle of `period_ns`, or
  // kNoTurn when no other compute-limited container is active on the GPU (then no turns are needed).
  // Entries not refreshed for `stale_ns` belong to containers that stopped and are reused.
  std::uint64_t refresh(std::uint64_t container, unsigned limit_percent, std::uint64_t period_ns,
                        std::uint64_t now_ns, std::uint64_t stale_ns = 2'000'000'000ULL);

 private:
  NodeTurns(TurnTable* table, std::size_t size) : table_(table), size_(size) {}
  TurnTable* table_;
  std::size_t size_;
  int own_ = -1;
};

}  // namespace gpuslice::shm
