// The read-only limits file: an administrator's caps that the environment cannot raise.
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <optional>
#include <string>
#include <string_view>

#include "config/parse_internal.h"
#include "config/settings.h"
#include "config/text_util.h"

namespace gpuslice::config {

namespace {

constexpr std::size_t kMaxFileBytes = std::size_t{1024} * 1024;

enum class ReadStatus { Ok, Missing, Failed };

std::string errno_text(int error) {
  char buffer[128];
  // GNU strerror_r: returns the message, which may or may not live in `buffer`.
  return strerror_r(error, buffer, sizeof buffer);
}

ReadStatus read_small_file(const std::string& path, std::string& out, std::string& why) {
  // O_NONBLOCK keeps a FIFO planted at the path from hanging the process on open.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return ReadStatus::Missing;
    why = "cannot open: " + errno_text(errno);
    return ReadStatus::Failed;
  }
  struct stat info {};
  ReadStatus status = ReadStatus::Ok;
  if (::fstat(fd, &info) != 0) {
    why = "cannot stat: " + errno_text(errno);
    status = ReadStatus::Failed;
  } else if (!S_ISREG(info.st_mode)) {
    why = "not a regular file";
    status = ReadStatus::Failed;
  } else {
    char buffer[16 * 1024];
    while (true) {
      const ssize_t n = ::read(fd, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        why = "cannot read: " + errno_text(errno);
        status = ReadStatus::Failed;
        break;
      }
      if (n == 0) break;
      if (out.size() + static_cast<std::size_t>(n) > kMaxFileBytes) {
        why = "larger than 1 MiB";
        status = ReadStatus::Failed;
        break;
      }
      out.append(buffer, static_cast<std::size_t>(n));
    }
  }
  ::close(fd);
  return status;
}

struct FileLimits {
  std::optional<DeviceValues> memory;
  std::optional<DeviceValues> compute;
  std::size_t memory_line = 0;
  std::size_t compute_line = 0;
};

// Parses the whole file; on the first problem returns "line N: problem".
Result<FileLimits> parse_limits_text(std::string_view text) {
  FileLimits limits;
  std::size_t line_number = 0;
  while (!text.empty()) {
    ++line_number;
    const std::size_t newline = text.find('\n');
    std::string_view line = text.substr(0, newline);
    text.remove_prefix(newline == std::string_view::npos ? text.size() : newline + 1);
    auto problem = [&](const std::string& why) {
      return make_error("line " + std::to_string(line_number) + ": " + why);
    };

    if (line.find('\0') != std::string_view::npos) return problem("contains a NUL byte");
    line = detail::trim(line);
    if (line.empty() || line.front() == '#') continue;
    const std::size_t equals = line.find('=');
    if (equals == std::string_view::npos) return problem("expected KEY=VALUE");
    const std::string_view key = detail::trim(line.substr(0, equals));
    std::string_view value = detail::trim(line.substr(equals + 1));
    // Values may be quoted as in an environment file; a size or JSON object never starts with a quote.
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') &&
        value.back() == value.front()) {
      value = value.substr(1, value.size() - 2);
    }

    std::optional<DeviceValues>* slot = nullptr;
    std::size_t* slot_line = nullptr;
    ValueKind kind = ValueKind::Size;
    if (key == "GPUSLICE_MEMORY_LIMIT") {
      slot = &limits.memory;
      slot_line = &limits.memory_line;
    } else if (key == "GPUSLICE_COMPUTE_LIMIT") {
      slot = &limits.compute;
      slot_line = &limits.compute_line;
      kind = ValueKind::Percent;
    } else {
      return problem("unknown key '" + detail::printable(key, 64) +
                     "' (expected GPUSLICE_MEMORY_LIMIT or GPUSLICE_COMPUTE_LIMIT)");
    }
    if (slot->has_value()) {
      return problem(std::string(key) + " is set twice (first on line " + std::to_string(*slot_line) + ")");
    }
    auto parsed = parse_device_values(value, kind, SizeDialect::Native);
    if (!parsed) return problem(detail::variable_error(key, value, parsed.error()));
    *slot = std::move(parsed).value();
    *slot_line = line_number;
  }
  return limits;
}

}  // namespace

void apply_limits_file(Settings& settings, const std::string& path) {
  if (path.empty()) return;
  const std::string name = "limits file '" + detail::printable(path) + "'";
  std::string text;
  std::string why;
  switch (read_small_file(path, text, why)) {
    case ReadStatus::Missing:
      return;
    case ReadStatus::Failed:
      settings.errors.push_back(name + ": " + why);
      return;
    case ReadStatus::Ok:
      break;
  }
  auto limits = parse_limits_text(text);
  if (!limits) {
    settings.errors.push_back(name + " " + limits.error());
    return;
  }
  if (limits->memory) settings.memory = merge_min(std::move(settings.memory), std::move(*limits->memory));
  if (limits->compute) settings.compute = merge_min(std::move(settings.compute), std::move(*limits->compute));
}

}  // namespace gpuslice::config
