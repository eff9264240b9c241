#include "node/host/assignment_file.h"

#include <unistd.h>

#include <cerrno>

#include "common/errno_text.h"
#include "node/host/limits_file.h"
#include "shared_state/assignment_text.h"

namespace gpuslice::node {
namespace {

constexpr std::string_view kAllocationPrefix = "# allocation ";

bool plain_name(std::string_view name) { return shm::assignment_plain_name(name); }

bool resource_name(std::string_view name) { return shm::assignment_resource_name(name); }

bool hex_digest(std::string_view digest) { return shm::assignment_hex_digest(digest); }

std::string too_long(std::size_t bytes) {
  return "assignment of " + std::to_string(bytes) + " bytes is longer than the " +
         std::to_string(shm::kMaxAssignmentBytes) + " the library reads (it would believe none of it)";
}

}  // namespace

Result<std::string> render_assignment(const ChannelAssignment& assignment) {
  std::string text;
  if (!assignment.resource.empty() || !assignment.devices_sha256.empty()) {
    if (!resource_name(assignment.resource))
      return make_error("assignment: resource \"" + assignment.resource + "\" is not a resource name");
    if (!hex_digest(assignment.devices_sha256))
      return make_error("assignment: devices digest \"" + assignment.devices_sha256 +
                        "\" is not hexadecimal");
    text += std::string(kAllocationPrefix) + assignment.resource + " " + assignment.devices_sha256 + "\n";
  }
  text += std::string("priority=") + priority_name(assignment.priority) + "\n";
  if (assignment.compute_all) {
    if (*assignment.compute_all < 1 || *assignment.compute_all > 100)
      return make_error("assignment: compute share " + std::to_string(*assignment.compute_all) +
                        " is not within 1-100");
    text += "compute=" + std::to_string(*assignment.compute_all) + "\n";
  }
  for (const auto& [key, value] : {std::pair{"floor", assignment.floor_percent},
                                   std::pair{"light-share", assignment.light_share_percent}}) {
    if (!value) continue;
    if (*value > 100) return make_error(std::string("assignment: ") + key + " is not within 0-100");
    text += std::string(key) + "=" + std::to_string(*value) + "\n";
  }
  for (const auto& [uuid, percent] : assignment.compute) {
    if (!plain_name(uuid)) return make_error("assignment: GPU UUID \"" + uuid + "\" is not a plain name");
    if (percent < 1 || percent > 100)
      return make_error("assignment: compute share " + std::to_string(percent) + " is not within 1-100");
    text += "compute." + uuid + "=" + std::to_string(percent) + "\n";
  }
  if (text.size() > shm::kMaxAssignmentBytes)
    return make_error(too_long(text.size()) + ": " + std::to_string(assignment.compute.size()) + " GPU(s)");
  return text;
}

Result<ChannelAssignment> parse_assignment(std::string_view text) {
  // The library's grammar (shared_state/assignment_text.h), so both read every file alike.
  ChannelAssignment out;
  shm::AssignmentSyntaxError error;
  const bool ok = shm::scan_assignment(
      text,
      [](void* context, const shm::AssignmentLine& line) {
        auto& a = *static_cast<ChannelAssignment*>(context);
        switch (line.key) {
          case shm::AssignmentLine::Key::Allocation:
            a.resource = std::string(line.resource);
            a.devices_sha256 = std::string(line.digest);
            break;
          case shm::AssignmentLine::Key::Priority:
            a.priority = line.level;
            break;
          case shm::AssignmentLine::Key::Compute:
            a.compute_all = line.percent;
            break;
          case shm::AssignmentLine::Key::ComputeGpu:
            a.compute.emplace(std::string(line.gpu), line.percent);
            break;
          case shm::AssignmentLine::Key::Floor:
            a.floor_percent = line.percent;
            break;
          case shm::AssignmentLine::Key::LightShare:
            a.light_share_percent = line.percent;
            break;
        }
      },
      &out, &error);
  if (!ok) {
    if (text.size() > shm::kMaxAssignmentBytes) return make_error(too_long(text.size()));
    return make_error(error.line != 0 ? "line " + std::to_string(error.line) + ": " + error.what
                                      : std::string(error.what));
  }
  return out;
}

std::string assignment_path(const std::string& channel_dir, const std::string& writer) {
  return channel_dir + "/" + writer + std::string(kAssignmentSuffix);
}

std::string assignment_path(const HostLayout& layout, const std::string& writer) {
  return assignment_path(layout.channel_dir(), writer);
}

Result<bool> write_assignment(const std::string& channel_dir, const std::string& writer,
                              const ChannelAssignment& assignment) {
  if (!plain_name(writer)) return make_error("node-channel writer \"" + writer + "\" is not a plain name");
  auto text = render_assignment(assignment);
  if (!text) return make_error(assignment_path(channel_dir, writer) + ": " + text.error());
  return write_file_atomically(assignment_path(channel_dir, writer), *text, 0644);
}

Result<bool> write_assignment(const HostLayout& layout, const std::string& writer,
                              const ChannelAssignment& assignment) {
  return write_assignment(layout.channel_dir(), writer, assignment);
}

Result<bool> remove_assignment(const HostLayout& layout, const std::string& writer) {
  if (!plain_name(writer)) return make_error("node-channel writer \"" + writer + "\" is not a plain name");
  const std::string path = assignment_path(layout, writer);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    return make_error("cannot remove " + path + ": " + fs::errno_text(errno));
  return true;
}

}  // namespace gpuslice::node
