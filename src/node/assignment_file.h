// The operator's assignment of one node-channel writer, <root>/channel/<writer>.assigned
// (shared_state/node_channel.h reads it): the highest priority level the writer's records are
// believed at and its compute share on each GPU. Written root-owned 0644 beside the writer's
// directory, where the container (which has the channel mounted read-only) cannot change it. The
// device plugin and the DRA plugin both write it through here.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/priority.h"
#include "common/result.h"
#include "node/host_layout.h"

namespace gpuslice::node {

struct ChannelAssignment {
  Priority priority = Priority::Normal;
  std::vector<std::pair<std::string, unsigned>> compute;  // GPU UUID, percent 1-100; none: no turn
};

// "priority=<level>\n" then "compute.<uuid>=<percent>\n" per GPU. An error when a value is out of
// range, a UUID is not a plain name, or the text is longer than the library reads (shm::kMaxAssignmentBytes).
Result<std::string> render_assignment(const ChannelAssignment& assignment);
std::string assignment_path(const HostLayout& layout, const std::string& writer);
Result<bool> write_assignment(const HostLayout& layout, const std::string& writer,
                              const ChannelAssignment& assignment);
// A missing file is no error.
Result<bool> remove_assignment(const HostLayout& layout, const std::string& writer);

}  // namespace gpuslice::node
