#include "config/limits_file.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <string>
#include <string_view>
#include <utility>

#include "common/errno_text.h"
#include "common/safe_file.h"
#include "config/text_util.h"

namespace gpuslice::config {

namespace {

enum class ReadStatus { Ok, Missing, Failed };

ReadStatus read_small_file(const std::string& path, std::string& out, std::string& why) {
  // O_NONBLOCK keeps a FIFO planted at the path from hanging the process on open.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return ReadStatus::Missing;
    why = "cannot open: " + fs::errno_text(errno);
    return ReadStatus::Failed;
  }
  auto data = fs::read_fd_bounded(fd, kMaxLimitsFileBytes);
  ::close(fd);
  if (!data) {
    why = data.error();
    return ReadStatus::Failed;
  }
  out = std::move(data).value();
  return ReadStatus::Ok;
}

}  // namespace

Result<LimitValue> parse_limit_value(std::string_view key, std::string_view text) {
  ValueKind kind = ValueKind::Size;
  if (key == kComputeLimitKey) {
    kind = ValueKind::Percent;
  } else if (key != kMemoryLimitKey && key != kMemoryGuaranteeKey) {
    return make_error("unknown key '" + detail::printable(key, 64) + "' (expected " + kMemoryLimitKey + ", " +
                      kComputeLimitKey + " or " + kMemoryGuaranteeKey + ")");
  }
  if (text.find_first_of("\n\r") != std::string_view::npos)
    return make_error(detail::variable_error(key, text, "a value is one line"));
  auto parsed = parse_device_values(text, kind, SizeDialect::Native);
  if (!parsed) return make_error(detail::variable_error(key, text, parsed.error()));
  if (parsed->empty()) return make_error(detail::variable_error(key, text, "no value"));
  return LimitValue{std::string(text), std::move(parsed).value()};
}

Result<LimitsFile> parse_limits_file(std::string_view text) {
  LimitsFile limits;
  const std::string_view whole = text;
  std::size_t memory_line = 0;
  std::size_t compute_line = 0;
  std::size_t priority_line = 0;
  std::size_t threads_line = 0;
  std::size_t yield_line = 0;
  std::size_t mode_line = 0;
  std::size_t guarantee_line = 0;
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
    line = text::trim(line);
    if (line.empty() || line.front() == '#') continue;
    const std::size_t equals = line.find('=');
    if (equals == std::string_view::npos) return problem("expected KEY=VALUE");
    const std::string_view key = text::trim(line.substr(0, equals));
    std::string_view value = text::trim(line.substr(equals + 1));
    // Values may be quoted as in an environment file; a size or JSON object never starts with a quote.
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') &&
        value.back() == value.front()) {
      value = value.substr(1, value.size() - 2);
    }
    // Every key at most once; `none` leaves it absent (no cap).
    std::size_t* const seen = key == kMemoryLimitKey       ? &memory_line
                              : key == kComputeLimitKey    ? &compute_line
                              : key == kMemoryGuaranteeKey ? &guarantee_line
                              : key == kPriorityKey        ? &priority_line
                              : key == kMpsLowThreadsKey   ? &threads_line
                              : key == kMpsPriorityKey     ? &yield_line
                              : key == kMpsComputeKey      ? &mode_line
                                                           : nullptr;
    if (seen == nullptr)
      return problem("unknown key '" + detail::printable(key, 64) + "' (expected " + kMemoryLimitKey + ", " +
                     kComputeLimitKey + ", " + kMemoryGuaranteeKey + ", " + kPriorityKey + ", " +
                     kMpsLowThreadsKey + ", " + kMpsPriorityKey + " or " + kMpsComputeKey + ")");
    if (*seen != 0)
      return problem(std::string(key) + " is set twice (first on line " + std::to_string(*seen) + ")");
    *seen = line_number;
    if (value == kNoCap) continue;
    if (key == kPriorityKey) {
      auto level = parse_priority(value);
      if (!level) return problem(detail::variable_error(key, value, level.error()));
      limits.priority = *level;
    } else if (key == kMpsPriorityKey) {
      auto yield = parse_mps_yield(value);
      if (!yield) return problem(detail::variable_error(key, value, "expected gate, server or none"));
      limits.mps_yield = *yield;
    } else if (key == kMpsLowThreadsKey) {
      auto percent = parse_percent(value);
      if (!percent) return problem(detail::variable_error(key, value, percent.error()));
      limits.mps_low_threads = *percent;
    } else if (key == kMpsComputeKey) {
      const auto mode = parse_mps_compute_mode(value);
      if (!mode) return problem(detail::variable_error(key, value, "expected threads, time or none"));
      limits.mps_compute = *mode;
    } else {  // a size or a percent per device
      auto parsed = parse_limit_value(key, value);
      if (!parsed) return problem(parsed.error());
      (key == kMemoryLimitKey    ? limits.memory
       : key == kComputeLimitKey ? limits.compute
                                 : limits.guarantee) = std::move(parsed).value();
    }
  }
  // The guarantee is promised within the limit, whichever line came first.
  if (limits.guarantee && limits.memory) {
    if (auto where = guarantee_above_limit(limits.guarantee->values, limits.memory->values)) {
      return make_error("line " + std::to_string(guarantee_line) + ": " +
                        detail::variable_error(kMemoryGuaranteeKey, limits.guarantee->text,
                                               "above " + std::string(kMemoryLimitKey) + "='" +
                                                   detail::printable(limits.memory->text) + "' (line " +
                                                   std::to_string(memory_line) + ") on " + *where +
                                                   " (a guarantee is at most the limit)"));
    }
  }
  if (memory_line == 0 && compute_line == 0 && priority_line == 0 && threads_line == 0 && yield_line == 0 &&
      mode_line == 0 && guarantee_line == 0) {
    return make_error(std::string(whole.empty() ? "is empty" : "sets no limit") +
                      ", as a file being rewritten does for a moment; to lift the caps write " +
                      kMemoryLimitKey + "=" + kNoCap + " (or " + kComputeLimitKey + "=" + kNoCap + ")");
  }
  return limits;
}

std::string render_limits_file(const LimitsFile& limits, std::string_view header_comment) {
  std::string out;
  if (!header_comment.empty()) out += "# " + std::string(header_comment) + "\n";
  out += std::string(kMemoryLimitKey) + "=" + (limits.memory ? limits.memory->text : kNoCap) + "\n";
  out += std::string(kComputeLimitKey) + "=" + (limits.compute ? limits.compute->text : kNoCap) + "\n";
  if (limits.guarantee) out += std::string(kMemoryGuaranteeKey) + "=" + limits.guarantee->text + "\n";
  if (limits.priority) out += std::string(kPriorityKey) + "=" + priority_name(*limits.priority) + "\n";
  if (limits.mps_low_threads)
    out += std::string(kMpsLowThreadsKey) + "=" + std::to_string(*limits.mps_low_threads) + "\n";
  if (limits.mps_yield) out += std::string(kMpsPriorityKey) + "=" + mps_yield_name(*limits.mps_yield) + "\n";
  if (limits.mps_compute)
    out += std::string(kMpsComputeKey) + "=" + mps_compute_mode_name(*limits.mps_compute) + "\n";
  return out;
}

Result<LimitsFile> read_limits_file(const std::string& path) {
  const std::string name = "limits file '" + detail::printable(path) + "'";
  std::string text;
  std::string why;
  switch (read_small_file(path, text, why)) {
    case ReadStatus::Missing: {
      LimitsFile none;
      none.missing = true;
      return none;
    }
    case ReadStatus::Failed:
      return make_error(name + ": " + why);
    case ReadStatus::Ok:
      break;
  }
  auto limits = parse_limits_file(text);
  if (!limits) return make_error(name + " " + limits.error());
  return limits;
}

void apply_limits_file(Settings& settings, const std::string& path) {
  if (path.empty()) return;
  auto limits = read_limits_file(path);
  if (!limits) {
    settings.errors.push_back(limits.error());
    return;
  }
  settings.limits_file_missing = limits->missing;
  settings.memory_cap = limits->memory ? std::move(limits->memory->values) : DeviceValues{};
  settings.compute_cap = limits->compute ? std::move(limits->compute->values) : DeviceValues{};
  settings.guarantee_cap = limits->guarantee ? std::move(limits->guarantee->values) : DeviceValues{};
  settings.mps_low_threads = limits->mps_low_threads;
  settings.mps_yield = limits->mps_yield.value_or(MpsYield::Gate);
  settings.mps_compute = limits->mps_compute.value_or(MpsComputeMode::Time);
  // The operator's level is a ceiling: a container asking for more runs at it, one asking for
  // nothing runs at it too (the node daemon wrote it for this container).
  if (limits->priority)
    settings.priority =
        settings.priority ? lower_priority(*settings.priority, *limits->priority) : *limits->priority;
}

}  // namespace gpuslice::config
