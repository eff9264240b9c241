#include "node/assignment_file.h"

#include <unistd.h>

#include <cerrno>

#include "common/errno_text.h"
#include "node/limits_file.h"
#include "shared_state/node_channel.h"

namespace gpuslice::node {
namespace {

bool plain_name(const std::string& name) {
  if (name.empty() || name.size() > 128 || name[0] == '.') return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

Result<std::string> render_assignment(const ChannelAssignment& assignment) {
  std::string text = std::string("priority=") + priority_name(assignment.priority) + "\n";
  for (const auto& [uuid, percent] : assignment.compute) {
    if (!plain_name(uuid)) return make_error("assignment: GPU UUID \"" + uuid + "\" is not a plain name");
    if (percent < 1 || percent > 100)
      return make_error("assignment: compute share " + std::to_string(percent) + " is not within 1-100");
    text += "compute." + uuid + "=" + std::to_string(percent) + "\n";
  }
  if (text.size() > shm::kMaxAssignmentBytes)
    return make_error("assignment of " + std::to_string(assignment.compute.size()) + " GPU(s) is " +
                      std::to_string(text.size()) + " bytes, more than the " +
                      std::to_string(shm::kMaxAssignmentBytes) + " the library reads");
  return text;
}

std::string assignment_path(const HostLayout& layout, const std::string& writer) {
  return layout.channel_writer_dir(writer) + ".assigned";
}

Result<bool> write_assignment(const HostLayout& layout, const std::string& writer,
                              const ChannelAssignment& assignment) {
  if (!plain_name(writer)) return make_error("node-channel writer \"" + writer + "\" is not a plain name");
  auto text = render_assignment(assignment);
  if (!text) return make_error(text.error());
  return write_file_atomically(assignment_path(layout, writer), *text, 0644);
}

Result<bool> remove_assignment(const HostLayout& layout, const std::string& writer) {
  if (!plain_name(writer)) return make_error("node-channel writer \"" + writer + "\" is not a plain name");
  const std::string path = assignment_path(layout, writer);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    return make_error("cannot remove " + path + ": " + fs::errno_text(errno));
  return true;
}

}  // namespace gpuslice::node
