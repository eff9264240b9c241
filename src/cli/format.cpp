#include "cli/format.h"

#include <algorithm>

#include "cli/terminal_text.h"

namespace gpuslice::cli {

std::string format_bytes(std::uint64_t bytes) {
  if (bytes == ~0ULL) return "unlimited";
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int unit = 0;
  std::uint64_t scale = 1;
  while (unit < 6 && bytes / scale >= 1024) {
    scale *= 1024;
    ++unit;
  }
  char text[48];
  if (bytes % scale == 0) {
    std::snprintf(text, sizeof text, "%llu %s", static_cast<unsigned long long>(bytes / scale), kUnits[unit]);
  } else {
    std::snprintf(text, sizeof text, "%.2f %s", static_cast<double>(bytes) / static_cast<double>(scale),
                  kUnits[unit]);
  }
  return text;
}

std::string format_duration_ns(double ns) {
  char text[48];
  if (ns < 1000.0) {
    std::snprintf(text, sizeof text, "%.0f ns", ns);
  } else if (ns < 1e6) {
    std::snprintf(text, sizeof text, "%.3g us", ns / 1e3);
  } else if (ns < 1e9) {
    std::snprintf(text, sizeof text, "%.3g ms", ns / 1e6);
  } else {
    std::snprintf(text, sizeof text, "%.3f s", ns / 1e9);
  }
  return text;
}

Table::Table(std::vector<std::string> headers, std::vector<bool> right_aligned)
    : headers_(std::move(headers)), right_(std::move(right_aligned)) {
  right_.resize(headers_.size(), false);
}

void Table::add_row(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  rows_.push_back(std::move(cells));
}

void Table::print(std::FILE* out) const {
  // Every cell is rendered safe for a terminal here, so no caller can forget it.
  std::vector<std::vector<std::string>> shown;
  shown.reserve(rows_.size() + 1);
  auto escaped = [](const std::vector<std::string>& cells) {
    std::vector<std::string> safe;
    safe.reserve(cells.size());
    for (const auto& cell : cells) safe.push_back(terminal_text(cell));
    return safe;
  };
  shown.push_back(escaped(headers_));
  for (const auto& row : rows_) shown.push_back(escaped(row));
  std::vector<std::size_t> widths(headers_.size());
  for (const auto& row : shown) {
    for (std::size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], terminal_columns(row[c]));
  }
  for (const auto& cells : shown) {
    std::string line;
    for (std::size_t c = 0; c < cells.size(); ++c) {
      std::string pad(widths[c] - terminal_columns(cells[c]), ' ');
      bool last = c + 1 == cells.size();
      if (right_[c]) {
        line += pad + cells[c];
      } else {
        line += cells[c];
        if (!last) line += pad;
      }
      if (!last) line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::fprintf(out, "%s\n", line.c_str());
  }
}

}  // namespace gpuslice::cli
