// Files in the profile directory, which other processes (other containers, other users) may share.
// The directory is checked once at start (ours or root's; writable by others only with the sticky
// bit) and every file is opened relative to it without following a symlink and only if it is a
// regular file, so nobody can redirect our writes (e.g. `.metrics.log.tmp` -> /etc/passwd) or make
// a read block (a FIFO). Allocation-free: a flush may run in a signal handler.
#pragma once

#include <cstddef>
#include <cstdint>

#include "profiler/session.h"

namespace gpuslice::profiler::detail {

// How long a flush waits for another process's hold on .metrics.lock before skipping the merge.
inline constexpr std::uint64_t kMetricsLockWaitNs = 2'000'000'000ULL;
// Most bytes read from one process's metrics file when merging.
inline constexpr std::size_t kMaxMetricsFileBytes = std::size_t{4} << 20;

// Creates `dir` (0755 where missing) and opens it; -1 with errno (EPERM: another user controls it).
int open_profile_dir(const char* dir);
// Writes <dir>/<final_name> through <temp_name> and a rename: readers see old or new, never partial.
bool replace_file(int dir_fd, const char* temp_name, const char* final_name, const char* data,
                  std::size_t length);
// Appends whole lines to <dir>/<name>; logs (with `dir` in the message) when it cannot.
void append_to_file(int dir_fd, const char* dir, const char* name, const char* data, std::size_t length);
// Opens <dir>/<name> for reading (regular files only, never blocks); -1 otherwise.
int open_for_reading(int dir_fd, const char* name);
// Reserves this process's metrics.<pid>[.<n>].log name in the session.
bool claim_own_file(Session& s);
// Takes .metrics.lock, waiting at most kMetricsLockWaitNs; -1 when it could not (errno set).
int lock_metrics(int dir_fd);
void unlock_metrics(int lock_fd);

}  // namespace gpuslice::profiler::detail
