// The operator's assignment of one node-channel writer, <root>/channel/<writer>.assigned
// (shared_state/node_channel.h reads it; shared_state/assignment_text.h is its one grammar, which
// parse_assignment() here uses too): the writer's level (the highest its records are believed at,
// and the level of a container that asks for none) and its compute share on each GPU. Written root-owned 0644
// beside the writer's directory, where the container (which has the channel mounted read-only) cannot change
// it. The one format, renderer, parser and writer of the file: the device plugin (device_catalog.cpp), the
// daemon's reconcile (priority_assignment.h) and the DRA plugin (dra/claim_preparer.cpp) all go
// through here.
//
//   # allocation <resource> <devices_sha256>    the device plugin's only: which allocation it is
//   priority=<low|normal|high>
//   compute.<gpu uuid>=<percent 1-100>           one per GPU with a share; none: no turn
//
// The library refuses a file longer than shm::kMaxAssignmentBytes (1024), comments included (low,
// no turn): the writer refuses to write an assignment that would not fit rather than have it
// refused.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "common/priority.h"
#include "common/result.h"
#include "node/host/host_layout.h"

namespace gpuslice::node {

inline constexpr std::string_view kAssignmentSuffix = ".assigned";

struct ChannelAssignment {
  Priority priority = Priority::Normal;
  std::map<std::string, unsigned> compute;      // GPU UUID -> percent 1-100; none: no turn
  std::optional<unsigned> compute_all;          // compute=: every GPU not in `compute`
  std::optional<unsigned> floor_percent;        // floor=: how far a container's own floor may go
  std::optional<unsigned> light_share_percent;  // light-share=: idem for its light share
  // The device plugin's allocation the writer is, for the daemon to match it to the pod the kubelet
  // lists (both or neither): its resource ("gpuslice.io/cores") and devices_digest() of its ids.
  std::string resource;
  std::string devices_sha256;
};

// The file's text. An error when a share is out of range, a UUID is not a plain name, the
// allocation is half given or not plain tokens, or the text (its comment line included) is longer
// than the library reads (shm::kMaxAssignmentBytes).
Result<std::string> render_assignment(const ChannelAssignment& assignment);
// The library's grammar exactly (shm::scan_assignment): what it refuses is an error here.
Result<ChannelAssignment> parse_assignment(std::string_view text);

std::string assignment_path(const std::string& channel_dir, const std::string& writer);
std::string assignment_path(const HostLayout& layout, const std::string& writer);
// Renders and replaces the file atomically (0644); nothing is written when rendering fails.
Result<bool> write_assignment(const std::string& channel_dir, const std::string& writer,
                              const ChannelAssignment& assignment);
Result<bool> write_assignment(const HostLayout& layout, const std::string& writer,
                              const ChannelAssignment& assignment);
// A missing file is no error.
Result<bool> remove_assignment(const HostLayout& layout, const std::string& writer);

}  // namespace gpuslice::node
