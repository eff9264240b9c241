// Small string helpers shared by the configuration parsers (internal to gpuslice_config).
#pragma once

#include <string>
#include <string_view>

#include "common/text.h"

namespace gpuslice::config::detail {

using text::is_space;
using text::trim;
inline bool is_digit(char c) { return c >= '0' && c <= '9'; }
inline char ascii_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

inline bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (ascii_lower(a[i]) != ascii_lower(b[i])) return false;
  }
  return true;
}

inline bool istarts_with(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && iequals(s.substr(0, prefix.size()), prefix);
}

std::string to_lower(std::string_view s);

// A value as it may appear inside a log line: non-printable bytes become \xNN (so a value cannot
// forge extra log lines) and anything past `max_chars` is cut with "...".
std::string printable(std::string_view value, size_t max_chars = 128);

// "VAR='value': reason", the one message per malformed variable.
std::string variable_error(std::string_view name, std::string_view value, std::string_view reason);

}  // namespace gpuslice::config::detail
