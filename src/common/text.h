// Small text helpers shared by every component (header-only: no allocation, no locale).
#pragma once

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

}  // namespace gpuslice::text
