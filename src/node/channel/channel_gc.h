// Writer directories of the node channel that nobody writes any more. The device plugin makes one
// per vram and `cores` allocation (<root>/channel/<id>, with <id>.assigned beside it) and the kubelet
// never says when an allocation ends; a live container rewrites its records every 100 ms, and the
// daemon moves the directory's mtime of every allocation the kubelet lists (one without records
// included: priority_assignment.h), so a writer directory none of whose entries changed for the
// grace period belongs to a container that is gone. Left in place, each would cost every reader's
// scan a directory (docs/priority.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace gpuslice::node {

// Removes <channel_dir>/<id> (its regular files, then the directory) and <id>.assigned for every
// writer directory with an assignment (the device plugin's) that is root-owned, not a link, and
// unchanged for `grace_ns` of CLOCK_REALTIME up to `now_ns`. Returns how many it removed.
std::size_t remove_stale_writers(const std::string& channel_dir, std::uint64_t grace_ns,
                                 std::uint64_t now_ns);

}  // namespace gpuslice::node
