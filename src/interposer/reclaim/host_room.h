// How much host memory a borrowing process can still pin: each borrowed allocation holds its size
// in pinned host memory (reclaim_engine.cpp prepares it ahead), which the container's memory
// cgroup counts. A borrow the host cannot back is refused rather than ending in the kernel's
// out-of-memory killer, which would kill the borrower the feature promises not to kill.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace gpuslice::interposer::reclaim {

// Left for the process's own use beyond what borrowing pins.
inline constexpr std::uint64_t kHostMarginBytes = 512ULL << 20;

// "MemAvailable:" of /proc/meminfo, bytes.
std::optional<std::uint64_t> mem_available(std::string_view meminfo);
// The cgroup v2 path of /proc/self/cgroup (its "0::" line).
std::optional<std::string> cgroup_v2_path(std::string_view proc_self_cgroup);
// The cgroup v1 memory controller's path of /proc/self/cgroup (the line naming "memory").
std::optional<std::string> cgroup_v1_memory_path(std::string_view proc_self_cgroup);
// A memory.max or memory.current value, bytes; nullopt for "max" (no limit) or what is not a number.
std::optional<std::uint64_t> cgroup_bytes(std::string_view value);

// This process's /proc/<pid>/cgroup: /proc/self is a symbolic link, which the safe reads refuse.
std::string own_cgroup_file();

// The host memory this process may still pin: the smallest of MemAvailable and, for its memory
// cgroup and every ancestor with a limit, the limit less the usage (cgroup v2: memory.max and
// memory.current; v1: memory.limit_in_bytes and memory.usage_in_bytes under
// /sys/fs/cgroup/memory). Read from /proc and /sys/fs/cgroup; nullopt when none of them can be
// read (then nothing is known to refuse by).
std::optional<std::uint64_t> host_room_bytes();

// Whether `need` more pinned bytes fit in `room`, keeping kHostMarginBytes (room unknown: yes).
bool host_room_allows(std::uint64_t need, std::optional<std::uint64_t> room);

}  // namespace gpuslice::interposer::reclaim
