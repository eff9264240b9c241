#include "node/assignment_file.h"

#include <unistd.h>

#include <cerrno>

#include "common/errno_text.h"
#include "node/limits_file.h"
#include "shared_state/node_channel.h"

namespace gpuslice::node {
namespace {

constexpr std::string_view kAllocationPrefix = "# allocation ";

bool plain_name(std::string_view name) {
  if (name.empty() || name.size() > 128 || name[0] == '.') return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

// A resource name as the kubelet lists it ("gpuslice.io/cores").
bool resource_name(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || c == '.' || c == '/';
    if (!ok) return false;
  }
  return true;
}

bool hex_digest(std::string_view digest) {
  if (digest.empty() || digest.size() > 128) return false;
  for (char c : digest) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.back() == '\r' || s.back() == ' ')) s.remove_suffix(1);
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  return s;
}

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
  if (text.size() > shm::kMaxAssignmentBytes) return make_error(too_long(text.size()));
  ChannelAssignment out;
  bool have_priority = false;
  bool have_allocation = false;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    const std::string_view line = trimmed(text.substr(0, end));
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
    if (line.rfind(kAllocationPrefix, 0) == 0) {
      const std::string_view rest = line.substr(kAllocationPrefix.size());
      const std::size_t space = rest.find(' ');
      if (have_allocation || space == std::string_view::npos || !resource_name(rest.substr(0, space)) ||
          !hex_digest(rest.substr(space + 1)))
        return make_error("malformed allocation line '" + std::string(line) + "'");
      out.resource = std::string(rest.substr(0, space));
      out.devices_sha256 = std::string(rest.substr(space + 1));
      have_allocation = true;
      continue;
    }
    if (line.empty() || line.front() == '#') continue;
    const std::size_t eq = line.find('=');
    if (eq == std::string_view::npos) return make_error("line without '=': '" + std::string(line) + "'");
    const std::string_view key = line.substr(0, eq);
    const std::string_view value = line.substr(eq + 1);
    if (key == "priority") {
      const auto level = priority_from_name(value);
      if (!level || have_priority) return make_error("bad priority line '" + std::string(line) + "'");
      out.priority = *level;
      have_priority = true;
    } else if (key.rfind("compute.", 0) == 0 && plain_name(key.substr(8))) {
      unsigned percent = 0;
      for (char c : value) {
        if (c < '0' || c > '9' || percent > 100) return make_error("bad share '" + std::string(value) + "'");
        percent = percent * 10 + static_cast<unsigned>(c - '0');
      }
      if (value.empty() || percent == 0 || percent > 100)
        return make_error("bad share '" + std::string(value) + "'");
      if (!out.compute.emplace(std::string(key.substr(8)), percent).second)
        return make_error("GPU '" + std::string(key.substr(8)) + "' given twice");
    } else {
      return make_error("unknown key '" + std::string(key) + "'");
    }
  }
  if (!have_priority) return make_error("no priority line");
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
