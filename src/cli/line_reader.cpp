// Bounded line reading: one line buffer, overlong lines skipped and reported, a cap on the whole file.
#include "cli/line_reader.h"

#include <unistd.h>

#include <cerrno>

#include "common/errno_text.h"

namespace gpuslice::cli {

Result<bool> for_each_line(int fd, const std::string& name, const LineLimits& limits,
                           const std::function<void(std::size_t, std::string_view)>& on_line,
                           const std::function<void(std::size_t)>& on_too_long) {
  std::string line;
  line.reserve(256);
  bool overlong = false;
  std::size_t line_number = 0;
  std::uint64_t total = 0;
  char buffer[65536];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      return make_error("cannot read " + name + ": " + fs::errno_text(errno));
    }
    if (n == 0) break;
    total += static_cast<std::uint64_t>(n);
    if (total > limits.max_file_bytes) {
      return make_error(name + " is larger than " + std::to_string(limits.max_file_bytes) +
                        " bytes; refusing to read further");
    }
    for (ssize_t i = 0; i < n; ++i) {
      char c = buffer[i];
      if (c == '\n') {
        ++line_number;
        if (overlong) {
          on_too_long(line_number);
        } else {
          on_line(line_number, line);
        }
        line.clear();
        overlong = false;
      } else if (!overlong) {
        if (line.size() >= limits.max_line_bytes) {
          overlong = true;
          line.clear();
        } else {
          line.push_back(c);
        }
      }
    }
  }
  if (overlong || !line.empty()) {
    ++line_number;
    if (overlong) {
      on_too_long(line_number);
    } else {
      on_line(line_number, line);
    }
  }
  return true;
}

}  // namespace gpuslice::cli
