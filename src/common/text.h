// Small text helpers shared by every component (header-only: no allocation, no locale).
#pragma once

#include <cstddef>
#include <string_view>

namespace gpuslice::text {

inline bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// `s` without leading and trailing ASCII white space.
inline std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// The text of `rest` up to the first `sep` (all of it when there is none); `rest` then starts after
// that separator. Splits lines or lists: `while (!rest.empty()) use(take_piece(rest, '\n'));`.
inline std::string_view take_piece(std::string_view& rest, char sep) {
  const std::size_t end = rest.find(sep);
  const std::string_view piece = rest.substr(0, end);
  rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
  return piece;
}

// One file name of letters, digits, '-', '_' and '.' (not "." or ".."), at most 128 bytes: what
// gpuslice accepts where a name from outside becomes a path component (container ids, the node
// channel's writer directory, a GPU UUID).
inline bool is_plain_name(std::string_view name) {
  if (name.empty() || name.size() > 128 || name == "." || name == "..") return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

// A GPU or MIG UUID as NVML and CUDA write them: "GPU-" or "MIG-" and 8-4-4-4-12 hex digits, or the
// older MIG form "MIG-GPU-<uuid>/<GPU instance>/<compute instance>". What reads a UUID from a file a
// tenant can write checks it with this before showing or matching it.
inline bool is_gpu_uuid(std::string_view uuid) {
  auto hex_groups = [](std::string_view s) {  // exactly 8-4-4-4-12
    static constexpr std::size_t kGroups[] = {8, 4, 4, 4, 12};
    std::size_t at = 0;
    for (std::size_t g = 0; g < 5; ++g) {
      if (g > 0 && (at >= s.size() || s[at++] != '-')) return std::string_view::npos;
      for (std::size_t i = 0; i < kGroups[g]; ++i, ++at) {
        const char c = at < s.size() ? s[at] : '\0';
        const bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
        if (!hex) return std::string_view::npos;
      }
    }
    return at;
  };
  auto small_number = [](std::string_view s) {
    if (s.empty() || s.size() > 5) return false;
    for (char c : s) {
      if (c < '0' || c > '9') return false;
    }
    return true;
  };
  const bool gpu = uuid.substr(0, 4) == "GPU-";
  if (!gpu && uuid.substr(0, 4) != "MIG-") return false;
  uuid.remove_prefix(4);
  if (!gpu && uuid.substr(0, 4) == "GPU-") {
    const std::size_t end = hex_groups(uuid.substr(4));
    if (end == std::string_view::npos) return false;
    std::string_view rest = uuid.substr(4 + end);
    if (rest.empty() || rest[0] != '/') return false;
    rest.remove_prefix(1);
    const std::size_t slash = rest.find('/');
    return slash != std::string_view::npos && small_number(rest.substr(0, slash)) &&
           small_number(rest.substr(slash + 1));
  }
  return hex_groups(uuid) == uuid.size();
}

}  // namespace gpuslice::text
