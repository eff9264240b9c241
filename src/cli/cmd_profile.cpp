// gpuslice profile DIR: summarises the Alnair-compatible profile files the interposer writes.
//   metrics.log:  per API, "name:<api>", "count:<n>", "burst:<total ns>" (one per line, or
//                 several key:value tokens on one line)
//   timeline.log: one call per line, "name:<api> start:<epoch ns> burst:<ns>"
// Malformed lines are reported with file and line number, skipped and counted.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/format.h"

namespace gpuslice::cli {
namespace {

constexpr int kReportedPerFile = 20;

const CommandSpec& profile_spec() {
  static const CommandSpec spec{
      "profile",
      "[options] DIR",
      "Summarise the per-API profile in DIR (metrics.log, timeline.log): count, total, mean, p50, p99.",
      "Sorted by total time. p50/p99 need timeline.log. DIR is what PFLOG or\n"
      "GPUSLICE_PROFILE_DIR named. Malformed lines are reported on stderr and skipped.",
      {{"--json", "", "machine-readable output"}}};
  return spec;
}

struct ApiStats {
  std::optional<std::uint64_t> count;     // from metrics.log
  std::optional<std::uint64_t> total_ns;  // from metrics.log
  std::vector<std::uint64_t> durations;   // from timeline.log
};

class LineReporter {
 public:
  explicit LineReporter(std::string file) : file_(std::move(file)) {}
  void malformed(std::size_t line, std::string_view text, std::string_view why) {
    if (++count_ <= kReportedPerFile) {
      std::string shown(text.substr(0, 120));
      std::fprintf(stderr, "gpuslice profile: %s:%zu: %.*s: '%s'; skipped\n", file_.c_str(), line,
                   static_cast<int>(why.size()), why.data(), shown.c_str());
    }
  }
  void finish() const {
    if (count_ > kReportedPerFile) {
      std::fprintf(stderr, "gpuslice profile: %s: %zu more malformed lines not shown\n", file_.c_str(),
                   count_ - kReportedPerFile);
    }
  }
  std::size_t count() const { return count_; }

 private:
  std::string file_;
  std::size_t count_ = 0;
};

std::optional<std::uint64_t> number(std::string_view text) { return parse_uint(text); }

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> tokens(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    std::size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

// Reads `path` line by line; returns false if it cannot be opened.
template <class Fn>
bool for_each_line(const std::string& path, Fn&& fn) {
  std::FILE* f = std::fopen(path.c_str(), "re");
  if (f == nullptr) return false;
  char* buffer = nullptr;
  std::size_t capacity = 0;
  std::size_t number_of_line = 0;
  ssize_t n;
  while ((n = getline(&buffer, &capacity, f)) >= 0) {
    std::string_view line(buffer, static_cast<std::size_t>(n));
    if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
    fn(++number_of_line, line);
  }
  std::free(buffer);
  std::fclose(f);
  return true;
}

struct PendingMetric {
  std::string name;
  std::size_t line = 0;
  std::optional<std::uint64_t> count, burst;
};

bool parse_metrics(const std::string& path, std::map<std::string, ApiStats>& apis, LineReporter& report) {
  PendingMetric pending;
  auto abandon = [&] {
    if (!pending.name.empty()) report.malformed(pending.line, pending.name, "record without count and burst");
    pending = PendingMetric{};
  };
  bool opened = for_each_line(path, [&](std::size_t line_no, std::string_view raw) {
    std::string_view line = trim(raw);
    if (line.empty()) return;
    auto toks = tokens(line);
    // Validate the whole line before applying it, so a bad line changes nothing.
    for (std::string_view tok : toks) {
      std::size_t colon = tok.find(':');
      std::string_view key = tok.substr(0, colon);
      std::string_view value = colon == std::string_view::npos ? std::string_view() : tok.substr(colon + 1);
      bool ok = colon != std::string_view::npos && !value.empty() &&
                (key == "name" || ((key == "count" || key == "burst") && number(value)));
      if (!ok) {
        report.malformed(line_no, raw, "expected name:<api>, count:<n> or burst:<ns>");
        return;
      }
    }
    for (std::string_view tok : toks) {
      std::size_t colon = tok.find(':');
      std::string_view key = tok.substr(0, colon);
      std::string_view value = tok.substr(colon + 1);
      if (key == "name") {
        abandon();
        pending.name = std::string(value);
        pending.line = line_no;
        continue;
      }
      if (pending.name.empty()) {
        report.malformed(line_no, raw, "value before any name:<api>");
        return;
      }
      auto& field = key == "count" ? pending.count : pending.burst;
      if (field) {
        report.malformed(line_no, raw, "repeated key in one record");
        return;
      }
      field = number(value);
      if (pending.count && pending.burst) {
        ApiStats& stats = apis[pending.name];
        stats.count = pending.count;  // a later record for the same API wins (files are rewritten whole)
        stats.total_ns = pending.burst;
        pending = PendingMetric{};
      }
    }
  });
  abandon();
  return opened;
}

bool parse_timeline(const std::string& path, std::map<std::string, ApiStats>& apis, LineReporter& report,
                    std::size_t& calls) {
  return for_each_line(path, [&](std::size_t line_no, std::string_view raw) {
    std::string_view line = trim(raw);
    if (line.empty()) return;
    std::string_view name;  // empty until seen (an API name is never empty)
    std::optional<std::uint64_t> start, burst;
    bool valid = true;
    for (std::string_view tok : tokens(line)) {
      std::size_t colon = tok.find(':');
      std::string_view key = tok.substr(0, colon);
      std::string_view value = colon == std::string_view::npos ? std::string_view() : tok.substr(colon + 1);
      if (colon != std::string_view::npos && key == "name" && name.empty() && !value.empty()) {
        name = value;
      } else if (key == "start" && !start && number(value)) {
        start = number(value);
      } else if (key == "burst" && !burst && number(value)) {
        burst = number(value);
      } else {
        valid = false;
        break;
      }
    }
    if (!valid || name.empty() || !start || !burst) {
      report.malformed(line_no, raw, "expected name:<api> start:<epoch ns> burst:<ns>");
      return;
    }
    apis[std::string(name)].durations.push_back(*burst);
    ++calls;
  });
}

// Nearest-rank percentile of sorted values.
std::uint64_t percentile(const std::vector<std::uint64_t>& sorted, double p) {
  auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  if (rank == 0) rank = 1;
  return sorted[rank - 1];
}

struct Row {
  std::string api;
  std::uint64_t count = 0;
  std::uint64_t total_ns = 0;
  std::optional<std::uint64_t> p50, p99;
};

}  // namespace

int cmd_profile(int argc, char** argv) {
  const CommandSpec& spec = profile_spec();
  ParsedArgs args;
  if (auto done = parse_command(spec, argc, argv, args)) return *done;
  if (args.positionals.size() != 1) return usage_error(spec, "expected exactly one directory");
  std::string dir = args.positionals[0];
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  std::string metrics_path = dir + "/metrics.log", timeline_path = dir + "/timeline.log";

  std::map<std::string, ApiStats> apis;
  LineReporter metrics_report(metrics_path), timeline_report(timeline_path);
  std::size_t calls = 0;
  bool have_metrics = parse_metrics(metrics_path, apis, metrics_report);
  bool have_timeline = parse_timeline(timeline_path, apis, timeline_report, calls);
  metrics_report.finish();
  timeline_report.finish();
  if (!have_metrics && !have_timeline) {
    return runtime_error(spec.name, "no readable metrics.log or timeline.log in " + dir);
  }
  std::size_t malformed = metrics_report.count() + timeline_report.count();

  std::vector<Row> rows;
  for (auto& [api, stats] : apis) {
    Row row;
    row.api = api;
    std::sort(stats.durations.begin(), stats.durations.end());
    if (stats.count) {
      row.count = *stats.count;
      row.total_ns = *stats.total_ns;
    } else {
      row.count = stats.durations.size();
      for (std::uint64_t d : stats.durations) row.total_ns += d;
    }
    if (!stats.durations.empty()) {
      row.p50 = percentile(stats.durations, 50);
      row.p99 = percentile(stats.durations, 99);
    }
    rows.push_back(std::move(row));
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return a.total_ns != b.total_ns ? a.total_ns > b.total_ns : a.api < b.api;
  });

  if (args.has("--json")) {
    std::string out =
        "{\"dir\":" + json_string(dir) + ",\"malformed_lines\":" + std::to_string(malformed) + ",\"apis\":[";
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      if (i > 0) out += ",";
      double mean = r.count > 0 ? static_cast<double>(r.total_ns) / static_cast<double>(r.count) : 0.0;
      char mean_text[48];
      std::snprintf(mean_text, sizeof mean_text, "%.1f", mean);
      out += "{\"api\":" + json_string(r.api) + ",\"count\":" + std::to_string(r.count) +
             ",\"total_ns\":" + std::to_string(r.total_ns) + ",\"mean_ns\":" + mean_text +
             ",\"p50_ns\":" + (r.p50 ? std::to_string(*r.p50) : "null") +
             ",\"p99_ns\":" + (r.p99 ? std::to_string(*r.p99) : "null") + "}";
    }
    out += "]}";
    std::printf("%s\n", out.c_str());
  } else {
    std::printf("Profile %s: %s, %s\n\n", dir.c_str(), have_metrics ? "metrics.log" : "no metrics.log",
                have_timeline ? ("timeline.log with " + std::to_string(calls) + " calls").c_str()
                              : "no timeline.log");
    Table table({"API", "COUNT", "TOTAL", "MEAN", "P50", "P99"}, {false, true, true, true, true, true});
    for (const Row& r : rows) {
      std::string mean =
          r.count > 0 ? format_duration_ns(static_cast<double>(r.total_ns) / static_cast<double>(r.count))
                      : std::string("-");
      table.add_row({r.api, std::to_string(r.count), format_duration_ns(static_cast<double>(r.total_ns)),
                     mean, r.p50 ? format_duration_ns(static_cast<double>(*r.p50)) : "-",
                     r.p99 ? format_duration_ns(static_cast<double>(*r.p99)) : "-"});
    }
    table.print(stdout);
  }
  if (malformed > 0) std::fprintf(stderr, "gpuslice profile: %zu malformed lines skipped\n", malformed);
  return kExitOk;
}

}  // namespace gpuslice::cli
