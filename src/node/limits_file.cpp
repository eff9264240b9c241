#include "node/limits_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

namespace gpuslice::node {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

std::string errno_text(int err) { return std::strerror(err); }

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

}  // namespace

Result<Limits> parse_limits(std::string_view text) {
  Limits limits;
  int line_no = 0;
  while (!text.empty()) {
    std::size_t eol = text.find('\n');
    std::string_view line = trim(text.substr(0, eol));
    text = eol == std::string_view::npos ? std::string_view{} : text.substr(eol + 1);
    ++line_no;
    if (line.empty() || line.front() == '#') continue;
    std::size_t eq = line.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      return make_error("line " + std::to_string(line_no) + ": expected KEY=VALUE, got '" +
                        std::string(line) + "'");
    }
    std::string key(trim(line.substr(0, eq)));
    std::string value(trim(line.substr(eq + 1)));
    if (key == kMemoryLimitKey) {
      limits.memory = std::move(value);
    } else if (key == kComputeLimitKey) {
      limits.compute = std::move(value);
    } else {
      limits.other.emplace_back(std::move(key), std::move(value));
    }
  }
  return limits;
}

std::string render_limits(const Limits& limits) {
  std::string out = "# Written by gpuslice-node: read-only caps for every process of this container.\n";
  if (limits.memory) out += std::string(kMemoryLimitKey) + "=" + *limits.memory + "\n";
  if (limits.compute) out += std::string(kComputeLimitKey) + "=" + *limits.compute + "\n";
  for (const auto& [key, value] : limits.other) out += key + "=" + value + "\n";
  return out;
}

Result<Limits> read_limits_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Limits{};
    return make_error(path + ": " + errno_text(errno));
  }
  std::string text;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int saved = errno;
      ::close(fd);
      return make_error(path + ": " + errno_text(saved));
    }
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > (1u << 20)) {
      ::close(fd);
      return make_error(path + ": larger than 1 MiB");
    }
  }
  ::close(fd);
  auto parsed = parse_limits(text);
  if (!parsed) return make_error(path + ": " + parsed.error());
  return parsed;
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
  bool ok = write_all(fd, content) && ::fchmod(fd, static_cast<mode_t>(mode)) == 0 && ::fsync(fd) == 0;
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

}  // namespace gpuslice::node
