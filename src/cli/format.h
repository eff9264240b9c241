// Human output for the CLI: sizes, durations and aligned tables (JSON is status/status_json.h's).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace gpuslice::cli {

// "512 B", "8 GiB", "1.50 GiB"; ~0 is "unlimited".
std::string format_bytes(std::uint64_t bytes);
// "850 ns", "12.3 us", "4.56 ms", "1.23 s".
std::string format_duration_ns(double ns);

// Left-aligned text columns, numbers right-aligned, two spaces apart.
class Table {
 public:
  explicit Table(std::vector<std::string> headers, std::vector<bool> right_aligned = {});
  void add_row(std::vector<std::string> cells);
  void print(std::FILE* out) const;
  bool empty() const { return rows_.empty(); }

 private:
  std::vector<std::string> headers_;
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace gpuslice::cli
