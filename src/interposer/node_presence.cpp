#include "interposer/node_presence.h"

#include <unistd.h>

#include <algorithm>
#include <new>
#include <string>

#include "common/clock.h"
#include "common/log.h"
#include "common/safe_file.h"
#include "interposer/devices.h"
#include "interposer/gate_driver.h"
#include "interposer/runtime.h"

namespace gpuslice::interposer {
namespace {
constexpr auto kRelaxed = std::memory_order_relaxed;
}

Result<std::unique_ptr<NodePresence>> NodePresence::open(const std::string& node_dir,
                                                         std::string_view gpu_uuid,
                                                         std::uint64_t container_key, std::string_view writer,
                                                         shm::NodeDirKind kind) {
  auto opened = shm::NodeChannel::open(node_dir, gpu_uuid, container_key, writer, kind);
  if (!opened) return make_error(opened.error());
  return std::make_unique<NodePresence>(std::move(opened).value());
}

void NodePresence::set_assignment(const shm::Assignment& assigned) {
  assigned_level_.store(priority_value(assigned.priority), kRelaxed);
  assigned_compute_.store(assigned.compute_percent, kRelaxed);
  assigned_floor_.store(assigned.floor_percent, kRelaxed);
  assigned_light_share_.store(assigned.light_share_percent, kRelaxed);
}

shm::Assignment NodePresence::assignment() const {
  shm::Assignment out;
  out.priority = priority_from_value(assigned_level_.load(kRelaxed)).value_or(Priority::Normal);
  out.compute_percent = assigned_compute_.load(kRelaxed);
  out.floor_percent = assigned_floor_.load(kRelaxed);
  out.light_share_percent = assigned_light_share_.load(kRelaxed);
  return out;
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
  if (rt == nullptr || rt->container_key == 0) return nullptr;
  const std::uint64_t now = gate_clock().now_ns();
  if (d.presence_failed && now < d.presence_retry_ns) return nullptr;
  auto opened = NodePresence::open(
      rt->settings.node_dir, d.uuid, rt->container_key, rt->settings.node_writer,
      rt->settings.node_dir_private ? shm::NodeDirKind::Private : shm::NodeDirKind::Shared);
  if (!opened) {
    constexpr std::uint64_t kFirstRetryNs = 1'000'000'000, kLastRetryNs = 60'000'000'000;
    if (!d.presence_failed) {
      GS_LOG(Error,
             "node channel refused on %s: no turns and no priorities with other containers until it "
             "can be opened (tried again with backoff): %s",
             d.uuid, opened.error().c_str());
      d.presence_backoff_ns = kFirstRetryNs;
    }
    d.presence_failed = true;
    d.presence_retry_ns = now + d.presence_backoff_ns;
    d.presence_backoff_ns = std::min(d.presence_backoff_ns * 2, kLastRetryNs);
    // Said in the state file too, so the daemon's metrics and `gpuslice status` show it.
    if (shm::Ledger* books = rt->ledger.load(std::memory_order_acquire)) books->note_node_channel_refused();
    return nullptr;
  }
  if (d.presence_failed) GS_LOG(Warn, "node channel on %s opened after an earlier refusal", d.uuid);
  d.presence_failed = false;
  d.presence = std::move(opened).value().release();  // lives as long as the process
  d.presence->set_assignment(assignment_for(d.uuid));
  GS_LOG(Debug, "node channel on %s: record %s", d.uuid, d.presence->channel().record_path().c_str());
  return d.presence;
}

namespace {
// The assignment file as last read (watcher thread only): its text and what it was.
char g_text[shm::kMaxAssignmentBytes];
std::size_t g_size = 0;
shm::Assignment::State g_state = shm::Assignment::State::None;
bool g_refusal_said = false;
}  // namespace

void refresh_assignments() {
  Runtime* rt = runtime();
  if (rt == nullptr) return;
  const std::string writer =
      rt->settings.node_writer.empty() ? "uid-" + std::to_string(::geteuid()) : rt->settings.node_writer;
  const int node_fd = fs::open_dir_raw(rt->settings.node_dir.c_str(), fs::DirTrust::SharedSticky);
  g_state = shm::Assignment::State::None;
  g_size = 0;
  if (node_fd >= 0) {
    fs::UniqueFd guard(node_fd);
    g_state = shm::NodeChannel::read_assignment_text(node_fd, writer.c_str(), g_text, &g_size);
  }
  shm::AssignmentSyntaxError error;
  const shm::Assignment whole = assignment_for({});
  if (g_state == shm::Assignment::State::Believed)
    (void)shm::assignment_for_gpu({g_text, g_size}, {}, &error);
  const bool refused = whole.state == shm::Assignment::State::Refused;
  if (refused && !g_refusal_said) {
    if (error.what == nullptr) error.what = "not a regular file the operator alone can write, or unreadable";
    GS_LOG(Error,
           "assignment %s/%s.assigned refused (line %u: %s): this container runs at low with no compute "
           "share until it is fixed",
           rt->settings.node_dir.c_str(), writer.c_str(), error.line, error.what);
  }
  g_refusal_said = refused;
  if (shm::Ledger* books = rt->ledger.load(std::memory_order_acquire)) {
    books->note_assignment(
        whole.state == shm::Assignment::State::None ? std::nullopt : std::optional<Priority>(whole.priority),
        refused);
  }
  for_each_ready_device([](DeviceState& d) {
    if (d.presence != nullptr) d.presence->set_assignment(assignment_for(d.uuid));
  });
}

shm::Assignment assignment_for(std::string_view uuid) {
  switch (g_state) {
    case shm::Assignment::State::None:
      return shm::Assignment{};
    case shm::Assignment::State::Refused: {
      shm::Assignment refused;
      refused.state = shm::Assignment::State::Refused;
      refused.priority = Priority::Low;
      return refused;
    }
    case shm::Assignment::State::Believed:
      break;
  }
  return shm::assignment_for_gpu({g_text, g_size}, uuid);
}

std::optional<Priority> assigned_default() {
  const shm::Assignment whole = assignment_for({});
  if (whole.state == shm::Assignment::State::None) return std::nullopt;
  return whole.priority;
}

}  // namespace node_presence
}  // namespace gpuslice::interposer
