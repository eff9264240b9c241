#include "interposer/reclaim/host_room.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>

#include "common/safe_file.h"
#include "common/text.h"

namespace gpuslice::interposer::reclaim {
namespace {

constexpr std::size_t kMaxFileBytes = std::size_t{64} << 10;

// The decimal number `text` starts with (nullopt: none, or past 64 bits); *used: its digits.
std::optional<std::uint64_t> leading_decimal(std::string_view text, std::size_t* used) {
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc()) return std::nullopt;
  *used = static_cast<std::size_t>(end - text.data());
  return value;
}

std::optional<std::string> read_text(const std::string& path) {
  auto text = fs::read_small_file(path, kMaxFileBytes);
  if (!text) return std::nullopt;
  return std::move(text).value();
}

// The path of the first line of /proc/self/cgroup ("id:controllers:path") that `wanted` accepts by
// its id and controllers: an absolute path without a way up, as it is appended to a directory.
template <class Wanted>
std::optional<std::string> cgroup_path(std::string_view proc_self_cgroup, Wanted wanted) {
  for (std::string_view lines = proc_self_cgroup; !lines.empty();) {
    const std::string_view line = text::take_piece(lines, '\n');
    const std::size_t first = line.find(':');
    const std::size_t second = first == std::string_view::npos ? first : line.find(':', first + 1);
    if (second == std::string_view::npos) continue;
    if (!wanted(line.substr(0, first), line.substr(first + 1, second - first - 1))) continue;
    const std::string_view path = line.substr(second + 1);
    if (path.empty() || path.front() != '/' || path.find("/..") != std::string_view::npos)
      return std::nullopt;
    return std::string(path);
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::uint64_t> mem_available(std::string_view meminfo) {
  constexpr std::string_view kKey = "MemAvailable:";
  for (std::string_view lines = meminfo; !lines.empty();) {
    const std::string_view line = text::take_piece(lines, '\n');
    if (line.substr(0, kKey.size()) != kKey) continue;
    const std::string_view rest = text::trim(line.substr(kKey.size()));
    std::size_t digits = 0;
    const std::optional<std::uint64_t> kib = leading_decimal(rest, &digits);
    if (!kib || text::trim(rest.substr(digits)) != "kB") return std::nullopt;
    if (*kib > (~0ULL >> 10)) return std::nullopt;
    return *kib << 10;
  }
  return std::nullopt;
}

std::optional<std::string> cgroup_v2_path(std::string_view proc_self_cgroup) {
  return cgroup_path(proc_self_cgroup, [](std::string_view id, std::string_view controllers) {
    return id == "0" && controllers.empty();
  });
}

std::optional<std::string> cgroup_v1_memory_path(std::string_view proc_self_cgroup) {
  return cgroup_path(proc_self_cgroup, [](std::string_view /*id*/, std::string_view controllers) {
    while (!controllers.empty())
      if (text::take_piece(controllers, ',') == "memory") return true;
    return false;
  });
}

std::optional<std::uint64_t> cgroup_bytes(std::string_view value) {
  value = text::trim(value);
  std::size_t digits = 0;
  const std::optional<std::uint64_t> bytes = leading_decimal(value, &digits);
  if (!bytes || digits != value.size()) return std::nullopt;
  return bytes;
}

std::string own_cgroup_file() { return "/proc/" + std::to_string(getpid()) + "/cgroup"; }

std::optional<std::uint64_t> host_room_bytes() {
  std::optional<std::uint64_t> room;
  auto take = [&room](std::uint64_t bytes) { room = room ? std::min(*room, bytes) : bytes; };
  if (auto meminfo = read_text("/proc/meminfo")) {
    if (auto available = mem_available(*meminfo)) take(*available);
  }
  const std::optional<std::string> self = read_text(own_cgroup_file());
  if (!self) return room;
  // The memory cgroup and its ancestors: a pod's limit sits above its containers'.
  auto walk = [&take](std::optional<std::string> path, const std::string& root, const char* limit_file,
                      const char* usage_file) {
    for (int depth = 0; path && depth < 32; ++depth) {
      const std::string dir = root + (*path == "/" ? std::string() : *path);
      const std::optional<std::string> max = read_text(dir + "/" + limit_file);
      const std::optional<std::string> current = read_text(dir + "/" + usage_file);
      const std::optional<std::uint64_t> limit = max ? cgroup_bytes(*max) : std::nullopt;
      const std::optional<std::uint64_t> used = current ? cgroup_bytes(*current) : std::nullopt;
      if (limit && used) take(*limit > *used ? *limit - *used : 0);
      if (*path == "/") break;
      const std::size_t slash = path->rfind('/');
      path = slash == 0 ? std::string("/") : path->substr(0, slash);
    }
  };
  walk(cgroup_v2_path(*self), "/sys/fs/cgroup", "memory.max", "memory.current");
  walk(cgroup_v1_memory_path(*self), "/sys/fs/cgroup/memory", "memory.limit_in_bytes",
       "memory.usage_in_bytes");
  return room;
}

bool host_room_allows(std::uint64_t need, std::optional<std::uint64_t> room) {
  if (!room) return true;
  return *room > kHostMarginBytes && need <= *room - kHostMarginBytes;
}

}  // namespace gpuslice::interposer::reclaim
