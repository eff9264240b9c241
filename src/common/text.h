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

}  // namespace gpuslice::text
