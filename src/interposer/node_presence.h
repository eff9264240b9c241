// This container's presence on the node channel (shared_state/node_channel.h), one per device: the
// channel opened once, by whichever feature needs it first, and the container's one record on it.
// Each feature writes only its own fields (the compute limit its share, for turns; priority sharing
// its level and busy time); the record is composed here from the latest fields of each and written
// whole, so no feature copies another's.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/priority.h"
#include "common/result.h"
#include "shared_state/node_channel.h"

namespace gpuslice::interposer {

struct DeviceState;

class NodePresence {
 public:
  static Result<std::unique_ptr<NodePresence>> open(const std::string& node_dir, std::string_view gpu_uuid,
                                                    std::uint64_t container_key, std::string_view writer,
                                                    shm::NodeDirKind kind = shm::NodeDirKind::Shared);
  explicit NodePresence(std::unique_ptr<shm::NodeChannel> channel) : channel_(std::move(channel)) {}

  // The compute limit's field: its percent (0 = none), for the turns of limited containers.
  void publish_compute_limit(unsigned percent, std::uint64_t now_ns);
  // Priority sharing's fields (see limiter::PeerView).
  struct PriorityFields {
    Priority priority = Priority::Normal;
    std::uint64_t busy_until_ns = 0;
    std::uint64_t held_back_ns = 0;
    std::uint32_t device_share_permille = 0;
    std::uint32_t busy_period_us = 0;
  };
  void publish_priority(const PriorityFields& fields, std::uint64_t now_ns);

  // For reading the other containers' records.
  shm::NodeChannel& channel() { return *channel_; }

  // What the operator assigned this container on the GPU (node_presence::refresh_assignments()
  // hands it over once per tick): the level it runs at when it asks for none and the highest it
  // runs at, its compute share (0: none, so it takes no turn), and the yield limits.
  void set_assignment(const shm::Assignment& assigned);
  // The assigned level as a Priority's value, for the gate to read live as its ceiling and default.
  const std::atomic<std::uint32_t>* assigned_level() const { return &assigned_level_; }
  unsigned assigned_compute_percent() const { return assigned_compute_.load(std::memory_order_relaxed); }
  shm::Assignment assignment() const;

 private:
  void publish(std::uint64_t now_ns);

  std::unique_ptr<shm::NodeChannel> channel_;
  std::atomic<std::uint32_t> compute_limit_{0};
  std::atomic<std::uint32_t> priority_{priority_value(Priority::Normal)};
  std::atomic<std::uint64_t> busy_until_ns_{0};
  std::atomic<std::uint64_t> held_back_ns_{0};
  std::atomic<std::uint32_t> device_share_permille_{0};
  std::atomic<std::uint32_t> busy_period_us_{0};
  std::atomic<std::uint32_t> assigned_level_{priority_value(Priority::Normal)};
  std::atomic<std::uint32_t> assigned_compute_{0};
  std::atomic<std::int32_t> assigned_floor_{-1};
  std::atomic<std::int32_t> assigned_light_share_{-1};
};

namespace node_presence {
// The presence of a ready device, opened on its first use (watcher thread); null when this process
// has no container key or the channel cannot be used here: said (logged and noted in the state
// file), and tried again after 1 s, doubling to at most a minute, so a squatted directory that is
// removed or fixed stops costing the container its priorities.
NodePresence* of(DeviceState& d);

// Once per watcher tick, before the features: reads this container's assignment file
// (<node dir>/<writer>.assigned; one read for every device), hands each open presence its GPU's
// part, and notes it in the state file; a refused file is logged once (until it changes).
void refresh_assignments();
// The level the operator's file gives this container when it asks for none: its priority line, low
// when the file is refused; nullopt when there is no assignment (then it takes no part unasked).
std::optional<Priority> assigned_default();
// This process's assignment on the GPU `uuid`, from the last refresh_assignments().
shm::Assignment assignment_for(std::string_view uuid);
}  // namespace node_presence

}  // namespace gpuslice::interposer
