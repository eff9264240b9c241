// The read-only limits file of a container (format of config::apply_limits_file: KEY=VALUE lines with
// the native variable names, '#' comments). The daemon writes it; libgpuslice reads it as caps.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"

namespace gpuslice::node {

inline constexpr const char* kMemoryLimitKey = "GPUSLICE_MEMORY_LIMIT";
inline constexpr const char* kComputeLimitKey = "GPUSLICE_COMPUTE_LIMIT";

struct Limits {
  std::optional<std::string> memory;   // value as written: "8589934592", "8Gi", "0=8Gi,1=4Gi", JSON
  std::optional<std::string> compute;  // "30", "0=30,1=50", JSON
  std::vector<std::pair<std::string, std::string>> other;  // keys we do not own, kept on rewrite

  bool empty() const { return !memory && !compute && other.empty(); }
};

// Parses the text of a limits file. Lines without '=' (other than comments/blank) are an error.
Result<Limits> parse_limits(std::string_view text);
std::string render_limits(const Limits& limits);

// A missing file reads as empty limits; an unreadable or malformed one is an error.
Result<Limits> read_limits_file(const std::string& path);

// Writes through a temporary file in the same directory and rename(2), so a reader sees either the
// old or the new content, never a partial one. Creates the directory if needed.
Result<bool> write_file_atomically(const std::string& path, std::string_view content, unsigned mode = 0644);

}  // namespace gpuslice::node
