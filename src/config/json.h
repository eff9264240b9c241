// A strict parser for the one JSON shape gpuslice reads: a flat object whose values are numbers or
// strings ({"0": "8Gi", "GPU-…": 4294967296}). It never throws, bounds what it allocates by input
// size, entry count and token length, and refuses nesting outright instead of recursing.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace gpuslice::config::json {

inline constexpr std::size_t kMaxTextBytes = std::size_t{64} * 1024;
inline constexpr std::size_t kMaxMembers = 256;
inline constexpr std::size_t kMaxTokenBytes = 256;  // a decoded key, string value or number

struct Member {
  std::string key;    // decoded (escapes resolved, UTF-8)
  std::string value;  // decoded string, or the number's text as written
  bool is_string = false;
};

// Fails on anything but one object (surrounding whitespace allowed), on duplicate keys, on nested
// objects/arrays, true/false/null, bad escapes, lone surrogates and control characters in strings.
Result<std::vector<Member>> parse_flat_object(std::string_view text);

}  // namespace gpuslice::config::json
