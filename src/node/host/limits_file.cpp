#include "node/host/limits_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <random>

#include "common/errno_text.h"

namespace gpuslice::node {
namespace {

using fs::errno_text;

constexpr const char* kHeader =
    "Written by gpuslice-node: read-only caps for every process of this container.";

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

Limits text_of(const config::LimitsFile& file) {
  Limits limits;
  if (file.memory) limits.memory = file.memory->text;
  if (file.compute) limits.compute = file.compute->text;
  limits.priority = file.priority;
  limits.mps_low_threads = file.mps_low_threads;
  limits.mps_compute = file.mps_compute;
  limits.mps_yield = file.mps_yield;
  if (file.guarantee) limits.guarantee = file.guarantee->text;
  return limits;
}

// Moves the mtime of `fd` past that of the file at `path` it is about to replace, when the clock has not
// already done so (a coarse filesystem clock, or a file dated ahead of it).
bool mtime_after_replaced(int fd, const std::string& path) {
  struct stat old {
  }, now{};
  if (::lstat(path.c_str(), &old) != 0) return true;  // nothing replaced
  if (::fstat(fd, &now) != 0) return false;
  const timespec& was = old.st_mtim;
  const timespec& is = now.st_mtim;
  if (is.tv_sec > was.tv_sec || (is.tv_sec == was.tv_sec && is.tv_nsec > was.tv_nsec)) return true;
  timespec times[2] = {{0, UTIME_OMIT}, was};
  if (++times[1].tv_nsec == 1'000'000'000) {
    times[1].tv_nsec = 0;
    ++times[1].tv_sec;
  }
  return ::futimens(fd, times) == 0;
}

// Holds an exclusive flock on a directory for its lifetime.
class DirectoryLock {
 public:
  explicit DirectoryLock(const std::string& dir) {
    fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd_ < 0) {
      error_ = dir + ": " + errno_text(errno);
      return;
    }
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      error_ = "cannot lock " + dir + ": " + errno_text(errno);
      ::close(fd_);
      fd_ = -1;
      return;
    }
  }
  ~DirectoryLock() {
    if (fd_ >= 0) ::close(fd_);  // closing drops the flock
  }
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;
  const std::string& error() const { return error_; }

 private:
  int fd_ = -1;
  std::string error_;
};

}  // namespace

Result<Limits> parse_limits(std::string_view text) {
  auto parsed = config::parse_limits_file(text);
  if (!parsed) return make_error(parsed.error());
  return text_of(*parsed);
}

std::string render_limits(const Limits& limits) {
  config::LimitsFile file;
  if (limits.memory) file.memory = config::LimitValue{*limits.memory, {}};
  if (limits.compute) file.compute = config::LimitValue{*limits.compute, {}};
  file.priority = limits.priority;
  file.mps_low_threads = limits.mps_low_threads;
  file.mps_compute = limits.mps_compute;
  file.mps_yield = limits.mps_yield;
  if (limits.guarantee) file.guarantee = config::LimitValue{*limits.guarantee, {}};
  return config::render_limits_file(file, kHeader);
}

Result<Limits> read_limits_file(const std::string& path) {
  auto parsed = config::read_limits_file(path);
  if (!parsed) return make_error(parsed.error());
  return text_of(*parsed);
}

Result<bool> write_file_atomically(const std::string& path, std::string_view content, unsigned mode) {
  std::filesystem::path target(path);
  std::filesystem::path dir = target.parent_path();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return make_error(dir.string() + ": " + ec.message());

  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string tmp = (dir / ("." + target.filename().string() + ".tmp" + std::to_string(rng()))).string();
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return make_error(tmp + ": " + errno_text(errno));
  bool ok = write_all(fd, content) && ::fchmod(fd, static_cast<mode_t>(mode)) == 0 &&
            mtime_after_replaced(fd, path) && ::fsync(fd) == 0;
  int saved = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    if (ok) saved = errno;
    ::unlink(tmp.c_str());
    return make_error(path + ": " + errno_text(saved));
  }
  // The rename is durable only once the directory entry is.
  int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  return true;
}

Result<Limits> update_limits_file(const std::string& path, const std::function<void(Limits&)>& change,
                                  const std::function<void(const Limits&)>& written) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return make_error(dir + ": " + ec.message());
  DirectoryLock lock(dir);
  if (!lock.error().empty()) return make_error(lock.error());
  auto current = read_limits_file(path);
  if (!current) return current;
  Limits limits = std::move(current).value();
  change(limits);
  // Never write a file the library would refuse: every process of the container would fail closed.
  const std::string text = render_limits(limits);
  if (auto checked = config::parse_limits_file(text); !checked) return make_error(checked.error());
  auto replaced = write_file_atomically(path, text);
  if (!replaced) return make_error(replaced.error());
  if (written) written(limits);
  return limits;
}

}  // namespace gpuslice::node
