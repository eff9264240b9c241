// Line by line through files a tenant may have written (profile logs): lines and memory stay bounded
// whatever the file holds. Opening such a file safely is common/safe_file.h's job.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace gpuslice::cli {

struct LineLimits {
  std::size_t max_line_bytes = 4096;          // longer lines are reported and skipped
  std::uint64_t max_file_bytes = 4ULL << 30;  // reading stops there with an error
};

// Calls on_line(line_number, line) for every line of the open file (newline stripped) and
// on_too_long(line_number) for lines over the limit; memory use is one line buffer.
// Returns an error naming `name` if reading fails or the file exceeds max_file_bytes.
Result<bool> for_each_line(int fd, const std::string& name, const LineLimits& limits,
                           const std::function<void(std::size_t, std::string_view)>& on_line,
                           const std::function<void(std::size_t)>& on_too_long);

}  // namespace gpuslice::cli
