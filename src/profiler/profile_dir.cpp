#include "profiler/profile_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "common/clock.h"
#include "common/errno_text.h"
#include "common/log.h"
#include "common/safe_file.h"
#include "profiler/text.h"

namespace gpuslice::profiler::detail {
namespace {

bool make_directories(const char* dir) {
  char path[PATH_MAX];
  std::size_t length = std::strlen(dir);
  if (length == 0 || length >= sizeof path) return false;
  std::memcpy(path, dir, length + 1);
  for (std::size_t i = 1; i <= length; ++i) {
    if (path[i] != '/' && path[i] != '\0') continue;
    char saved = path[i];
    path[i] = '\0';
    if (::mkdir(path, 0755) != 0 && errno != EEXIST) return false;
    path[i] = saved;
  }
  return true;
}

}  // namespace

int open_profile_dir(const char* dir) {
  if (!make_directories(dir)) return -1;
  return fs::open_dir_raw(dir, fs::DirTrust::SharedSticky);
}

bool replace_file(int dir_fd, const char* temp_name, const char* final_name, const char* data,
                  std::size_t length) {
  int fd = fs::open_in_dir_raw(dir_fd, temp_name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return false;
  bool written = write_all(fd, data, length);
  ::close(fd);
  // renameat replaces a symlink planted at final_name itself, never what it points to.
  if (!written || ::renameat(dir_fd, temp_name, dir_fd, final_name) != 0) {
    int saved = errno;
    ::unlinkat(dir_fd, temp_name, 0);
    errno = saved;
    return false;
  }
  return true;
}

void append_to_file(int dir_fd, const char* dir, const char* name, const char* data, std::size_t length) {
  int fd = fs::open_in_dir_raw(dir_fd, name, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) {
    GS_LOG(Warn, "profiler: cannot open %s in %s: %s", name, dir, fs::errno_name(errno));
    return;
  }
  if (!write_all(fd, data, length))
    GS_LOG(Warn, "profiler: cannot write %s in %s: %s", name, dir, fs::errno_name(errno));
  ::close(fd);
}

int open_for_reading(int dir_fd, const char* name) { return fs::open_in_dir_raw(dir_fd, name, O_RDONLY); }

// Reserves a per-process file name no other process (another container sharing the directory may
// have the same pid) and no earlier run uses.
bool claim_own_file(Session& s) {
  if (s.own_file_claimed) return true;
  const std::uint64_t pid = static_cast<std::uint64_t>(::getpid());
  for (std::uint64_t attempt = 0; attempt < 100; ++attempt) {
    char* p = put_str(s.own_file_name, "metrics.", 8);
    p = put_u64(p, pid);
    if (attempt > 0) {
      *p++ = '.';
      p = put_u64(p, attempt);
    }
    p = put_str(p, ".log", 4);
    *p = '\0';
    int fd = fs::open_in_dir_raw(s.dir_fd, s.own_file_name, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd >= 0) {
      ::close(fd);
      s.own_file_claimed = true;
      return true;
    }
    if (errno != EEXIST) return false;
  }
  return false;
}

int lock_metrics(int dir_fd) {
  int fd = fs::open_in_dir_raw(dir_fd, ".metrics.lock", O_RDWR | O_CREAT, 0644);
  if (fd < 0) return -1;
  // A holder that is stopped (SIGSTOP, a debugger) must not delay our exit without bound.
  const std::uint64_t deadline = monotonic_ns() + kMetricsLockWaitNs;
  for (;;) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return fd;
    if (errno != EWOULDBLOCK && errno != EINTR) break;
    if (monotonic_ns() >= deadline) {
      errno = ETIMEDOUT;
      break;
    }
    timespec pause{0, 10'000'000};
    ::nanosleep(&pause, nullptr);
  }
  int saved = errno;
  ::close(fd);
  errno = saved;
  return -1;
}

void unlock_metrics(int lock_fd) {
  ::flock(lock_fd, LOCK_UN);
  ::close(lock_fd);
}

}  // namespace gpuslice::profiler::detail
