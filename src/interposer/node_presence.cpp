#include "interposer/node_presence.h"

#include <new>

#include "common/log.h"
#include "interposer/runtime.h"

namespace gpuslice::interposer {
namespace {
constexpr auto kRelaxed = std::memory_order_relaxed;
}

Result<std::unique_ptr<NodePresence>> NodePresence::open(const std::string& node_dir,
                                                         std::string_view gpu_uuid,
                                                         std::uint64_t container_key,
                                                         std::string_view writer) {
  auto opened = shm::NodeChannel::open(node_dir, gpu_uuid, container_key, writer);
  if (!opened) return make_error(opened.error());
  return std::make_unique<NodePresence>(std::move(opened).value());
}

void NodePresence::refresh_assignment() {
  const shm::Assignment assigned = channel_->own_assignment();
  assigned_level_.store(priority_value(assigned.priority), kRelaxed);
  assigned_compute_.store(assigned.compute_percent, kRelaxed);
}

void NodePresence::publish_compute_limit(unsigned percent, std::uint64_t now_ns) {
  compute_limit_.store(percent, kRelaxed);
  publish(now_ns);
}

void NodePresence::publish_priority(const PriorityFields& fields, std::uint64_t now_ns) {
  priority_.store(priority_value(fields.priority), kRelaxed);
  busy_until_ns_.store(fields.busy_until_ns, kRelaxed);
  held_back_ns_.store(fields.held_back_ns, kRelaxed);
  device_share_permille_.store(fields.device_share_permille, kRelaxed);
  busy_period_us_.store(fields.busy_period_us, kRelaxed);
  publish(now_ns);
}

// Two features may publish at once (a launching thread's busy, the watcher's heartbeat): each
// write is a whole record of the latest fields, so the later one carries both.
void NodePresence::publish(std::uint64_t now_ns) {
  shm::PeerState record;
  record.compute_limit_percent = compute_limit_.load(kRelaxed);
  record.priority = priority_from_value(priority_.load(kRelaxed)).value_or(Priority::Normal);
  record.heartbeat_ns = now_ns;
  record.busy_until_ns = busy_until_ns_.load(kRelaxed);
  record.held_back_ns = held_back_ns_.load(kRelaxed);
  record.device_share_permille = device_share_permille_.load(kRelaxed);
  record.busy_period_us = busy_period_us_.load(kRelaxed);
  channel_->publish(record);
}

namespace node_presence {

NodePresence* of(DeviceState& d) {
  if (d.presence != nullptr) return d.presence;
  Runtime* rt = runtime();
  if (d.presence_failed || rt == nullptr || rt->container_key == 0) return nullptr;
  auto opened =
      NodePresence::open(rt->settings.node_dir, d.uuid, rt->container_key, rt->settings.node_writer);
  if (!opened) {
    d.presence_failed = true;
    GS_LOG(Error, "node channel refused on %s: no turns and no priorities with other containers: %s", d.uuid,
           opened.error().c_str());
    // Said in the state file too, so the daemon's metrics and `gpuslice status` show it.
    if (shm::Ledger* books = rt->ledger.load(std::memory_order_acquire)) books->note_node_channel_refused();
    return nullptr;
  }
  d.presence = std::move(opened).value().release();  // lives as long as the process
  d.presence->refresh_assignment();
  GS_LOG(Debug, "node channel on %s: record %s", d.uuid, d.presence->channel().record_path().c_str());
  return d.presence;
}

}  // namespace node_presence
}  // namespace gpuslice::interposer
