#include "profiler/metrics_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/errno_text.h"
#include "common/log.h"
#include "profiler/profile_dir.h"
#include "profiler/text.h"

namespace gpuslice::profiler::detail {
namespace {

bool is_process_metrics_file(const char* name) {
  std::size_t length = std::strlen(name);
  return length > 12 && std::strncmp(name, "metrics.", 8) == 0 && std::strcmp(name + length - 4, ".log") == 0;
}

// Index of `name` among known and extra names, adding it as an extra if there is room; -1 if not.
long find_or_add_name(Session& s, const char* name, std::size_t length, std::size_t* hint) {
  if (length == 0 || length >= kMaxNameBytes) return -1;
  // Files written by the same library list names in our order, so the next index usually matches.
  for (std::size_t step = 0; step < s.api_count; ++step) {
    std::size_t i = (*hint + step) % s.api_count;
    if (s.name_length[i] == length && std::memcmp(s.name(i), name, length) == 0) {
      *hint = i + 1;
      return static_cast<long>(s.canonical[i]);
    }
  }
  for (std::size_t e = 0; e < s.extra_count; ++e) {
    const char* extra = s.name(s.api_count + e);
    if (std::strlen(extra) == length && std::memcmp(extra, name, length) == 0) {
      return static_cast<long>(s.api_count + e);
    }
  }
  if (s.extra_count == kMaxExtraNames) return -1;
  char* slot = s.extra_names + s.extra_count * kMaxNameBytes;
  std::memcpy(slot, name, length);
  slot[length] = '\0';
  return static_cast<long>(s.api_count + s.extra_count++);
}

void merge_line(Session& s, const char* line, const char* end, long* current, std::size_t* hint) {
  std::uint64_t value = 0;
  const std::size_t length = static_cast<std::size_t>(end - line);
  if (length > 5 && std::memcmp(line, "name:", 5) == 0) {
    *current = find_or_add_name(s, line + 5, length - 5, hint);
  } else if (*current >= 0 && length > 6 && std::memcmp(line, "count:", 6) == 0 &&
             parse_u64(line + 6, end, &value)) {
    s.merged_count[*current] = saturating_add(s.merged_count[*current], value);
  } else if (*current >= 0 && length > 6 && std::memcmp(line, "burst:", 6) == 0 &&
             parse_u64(line + 6, end, &value)) {
    s.merged_total[*current] = saturating_add(s.merged_total[*current], value);
  }
}

void merge_file(Session& s, int dir_fd, const char* name) {
  int fd = open_for_reading(dir_fd, name);
  if (fd < 0) return;
  std::size_t read_total = 0;
  long current = -1;
  std::size_t hint = 0;
  std::size_t kept = 0;  // bytes of an unfinished line carried to the next read
  bool skipping_long_line = false;
  for (;;) {
    ssize_t n = ::read(fd, s.read_buffer + kept, kReadBufferBytes - kept);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    // Another process's file: read a bounded amount, whatever it claims.
    read_total += static_cast<std::size_t>(n);
    if (read_total > kMaxMetricsFileBytes) break;
    const char* end = s.read_buffer + kept + n;
    const char* line = s.read_buffer;
    for (const char* p = line; p != end; ++p) {
      if (*p != '\n') continue;
      if (!skipping_long_line) merge_line(s, line, p, &current, &hint);
      skipping_long_line = false;
      line = p + 1;
    }
    kept = static_cast<std::size_t>(end - line);
    if (kept == kReadBufferBytes) {
      skipping_long_line = true;
      kept = 0;
    } else {
      std::memmove(s.read_buffer, line, kept);
    }
  }
  ::close(fd);
}

}  // namespace

std::size_t format_metrics(const Session& s, const std::uint64_t* count, const std::uint64_t* total,
                           std::size_t entries) {
  char* p = s.text_buffer;
  for (std::size_t i = 0; i < entries; ++i) {
    if (count[i] == 0) continue;
    const char* name = s.name(i);
    p = put_str(p, "name:", 5);
    p = put_str(p, name, i < s.api_count ? s.name_length[i] : std::strlen(name));
    p = put_str(p, "\ncount:", 7);
    p = put_u64(p, count[i]);
    p = put_str(p, "\nburst:", 7);
    p = put_u64(p, total[i]);
    *p++ = '\n';
  }
  return static_cast<std::size_t>(p - s.text_buffer);
}

// metrics.log = sum of every metrics.<pid>.log in the directory, rebuilt under a lock so concurrent
// processes cannot publish a merge that misses the other's latest file.
void write_merged_metrics(Session& s) {
  int lock_fd = lock_metrics(s.dir_fd);
  if (lock_fd < 0) {
    GS_LOG(Warn, "profiler: metrics.log in %s not merged: cannot take .metrics.lock: %s", s.dir,
           fs::errno_name(errno));
    return;
  }
  // A descriptor of our own: getdents64 moves its offset.
  int dir_fd = ::openat(s.dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    const std::size_t slots = s.api_count + kMaxExtraNames;
    std::memset(s.merged_count, 0, slots * sizeof(std::uint64_t));
    std::memset(s.merged_total, 0, slots * sizeof(std::uint64_t));
    s.extra_count = 0;
    for (;;) {
      ssize_t n = ::getdents64(dir_fd, s.dirent_buffer, kDirentBufferBytes);
      if (n <= 0) break;
      for (ssize_t offset = 0; offset < n;) {
        const auto* entry = reinterpret_cast<const struct dirent64*>(s.dirent_buffer + offset);
        if (is_process_metrics_file(entry->d_name)) merge_file(s, dir_fd, entry->d_name);
        offset += entry->d_reclen;
      }
    }
    ::close(dir_fd);
    std::size_t length = format_metrics(s, s.merged_count, s.merged_total, s.api_count + s.extra_count);
    if (!replace_file(s.dir_fd, ".metrics.log.tmp", "metrics.log", s.text_buffer, length)) {
      GS_LOG(Warn, "profiler: cannot write metrics.log in %s: %s", s.dir, fs::errno_name(errno));
    }
  }
  unlock_metrics(lock_fd);
}

void write_own_metrics(Session& s) {
  if (!claim_own_file(s)) {
    GS_LOG(Warn, "profiler: cannot create a metrics file in %s: %s", s.dir, fs::errno_name(errno));
    return;
  }
  char temp_name[80];
  char* p = put_str(temp_name, ".", 1);
  p = put_str(p, s.own_file_name);
  p = put_str(p, ".tmp", 4);
  *p = '\0';
  std::size_t length = format_metrics(s, s.snapshot_count, s.snapshot_total, s.api_count);
  if (!replace_file(s.dir_fd, temp_name, s.own_file_name, s.text_buffer, length)) {
    GS_LOG(Warn, "profiler: cannot write %s in %s: %s", s.own_file_name, s.dir, fs::errno_name(errno));
  }
}

void report_dropped(Session& s, std::uint64_t dropped) {
  if (dropped == s.last_reported_dropped) return;
  s.last_reported_dropped = dropped;
  char line[64];
  char* p = put_str(line, "pid:", 4);
  p = put_u64(p, static_cast<std::uint64_t>(::getpid()));
  p = put_str(p, " dropped:", 9);
  p = put_u64(p, dropped);
  *p++ = '\n';
  append_to_file(s.dir_fd, s.dir, "profiler.log", line, static_cast<std::size_t>(p - line));
}

}  // namespace gpuslice::profiler::detail
