#include "cli/profile_data.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <string_view>

#include "cli/args.h"
#include "cli/line_reader.h"
#include "cli/terminal_text.h"
#include "common/safe_file.h"
#include "common/text.h"

namespace gpuslice::cli {
namespace {

constexpr std::size_t kReportedPerFile = 20;

class LineReporter {
 public:
  explicit LineReporter(std::string file) : file_(std::move(file)) {}
  void malformed(std::size_t line, std::string_view text, std::string_view why) {
    if (++count_ <= kReportedPerFile) {
      std::string shown = terminal_text(text, 120);
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

// One file of the directory: absent is fine (returns false), anything but a regular file is an error.
Result<bool> read_lines(int dirfd, const std::string& dir, const char* name, const ProfileLimits& limits,
                        LineReporter& report, const std::function<void(std::size_t, std::string_view)>& fn) {
  auto opened = fs::open_in_dir(dirfd, name, O_RDONLY);
  if (!opened) {
    if (errno == ENOENT) return false;
    return make_error(dir + "/" + opened.error());
  }
  const std::string shown = dir + "/" + name;
  fs::UniqueFd fd(*opened);
  LineLimits line_limits{limits.max_line_bytes, limits.max_file_bytes};
  auto read = for_each_line(fd.get(), shown, line_limits, fn, [&](std::size_t line) {
    report.malformed(line, "", "line longer than " + std::to_string(limits.max_line_bytes) + " bytes");
  });
  if (!read) return make_error(read.error());
  return true;
}

struct PendingMetric {
  std::string name;
  std::size_t line = 0;
  std::optional<std::uint64_t> count, burst;
};

class Loader {
 public:
  Loader(ProfileData& data, const ProfileLimits& limits) : data_(data), limits_(limits) {}

  std::optional<std::uint32_t> api_index(std::string_view name) {
    auto it = index_.find(std::string(name));
    if (it != index_.end()) return it->second;
    if (data_.api_names.size() >= limits_.max_apis) return std::nullopt;
    auto index = static_cast<std::uint32_t>(data_.api_names.size());
    data_.api_names.emplace_back(name);
    index_.emplace(std::string(name), index);
    return index;
  }

  void metrics_line(LineReporter& report, std::size_t line_no, std::string_view raw) {
    std::string_view line = text::trim(raw);
    if (line.empty()) return;
    auto toks = tokens(line);
    // Validate the whole line before applying it, so a bad line changes nothing.
    for (std::string_view tok : toks) {
      std::size_t colon = tok.find(':');
      std::string_view key = tok.substr(0, colon);
      std::string_view value = colon == std::string_view::npos ? std::string_view() : tok.substr(colon + 1);
      bool ok = colon != std::string_view::npos && !value.empty() &&
                (key == "name" || ((key == "count" || key == "burst") && parse_uint(value)));
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
        abandon_metric(report);
        pending_.name = std::string(value);
        pending_.line = line_no;
        continue;
      }
      if (pending_.name.empty()) {
        report.malformed(line_no, raw, "value before any name:<api>");
        return;
      }
      auto& field = key == "count" ? pending_.count : pending_.burst;
      if (field) {
        report.malformed(line_no, raw, "repeated key in one record");
        return;
      }
      field = parse_uint(value);
      if (pending_.count && pending_.burst) {
        if (data_.metrics.size() >= limits_.max_apis && !data_.metrics.count(pending_.name)) {
          report.malformed(line_no, raw, "too many distinct API names");
        } else {
          ApiTotals& totals = data_.metrics[pending_.name];
          totals.count = pending_.count;  // a later record for the same API wins (files are rewritten whole)
          totals.total_ns = pending_.burst;
        }
        pending_ = PendingMetric{};
      }
    }
  }

  void abandon_metric(LineReporter& report) {
    if (!pending_.name.empty())
      report.malformed(pending_.line, pending_.name, "record without count and burst");
    pending_ = PendingMetric{};
  }

  void timeline_line(LineReporter& report, std::size_t line_no, std::string_view raw) {
    std::string_view line = text::trim(raw);
    if (line.empty()) return;
    std::string_view name;
    std::optional<std::uint64_t> start, burst, pid, tid;
    bool valid = true;
    for (std::string_view tok : tokens(line)) {
      std::size_t colon = tok.find(':');
      std::string_view key = tok.substr(0, colon);
      std::string_view value = colon == std::string_view::npos ? std::string_view() : tok.substr(colon + 1);
      auto number = parse_uint(value);
      if (colon != std::string_view::npos && key == "name" && name.empty() && !value.empty()) {
        name = value;
      } else if (key == "start" && !start && number) {
        start = number;
      } else if (key == "burst" && !burst && number) {
        burst = number;
      } else if (key == "pid" && !pid && number && *number <= 0xffffffffULL) {
        pid = number;
      } else if (key == "tid" && !tid && number && *number <= 0xffffffffULL) {
        tid = number;
      } else {
        valid = false;
        break;
      }
    }
    if (!valid || name.empty() || !start || !burst) {
      report.malformed(line_no, raw, "expected name:<api> start:<epoch ns> burst:<ns>");
      return;
    }
    auto api = api_index(name);
    if (!api) {
      report.malformed(line_no, raw, "too many distinct API names");
      return;
    }
    ++data_.timeline_calls;
    if (data_.calls.size() >= limits_.max_calls) return;
    ProfileCall call{*api, *start, *burst, std::nullopt, std::nullopt};
    if (pid) call.pid = static_cast<std::uint32_t>(*pid);
    if (tid) call.tid = static_cast<std::uint32_t>(*tid);
    data_.calls.push_back(call);
  }

  void events_line(LineReporter& report, std::size_t line_no, std::string_view raw) {
    std::string_view line = text::trim(raw);
    if (line.empty()) return;
    RefusedAllocation event;
    std::size_t top = line.find(" top:");
    if (top != std::string_view::npos) {
      event.top = std::string(line.substr(top + 5));
      line = line.substr(0, top);
    }
    bool refused = false, valid = true, have_time = false;
    for (std::string_view tok : tokens(line)) {
      std::size_t colon = tok.find(':');
      if (colon == std::string_view::npos) {
        valid = false;
        break;
      }
      std::string_view key = tok.substr(0, colon), value = tok.substr(colon + 1);
      if (key == "event") {
        refused = value == "allocation_refused";
        continue;
      }
      if (key == "device") {
        bool negative = !value.empty() && value[0] == '-';
        auto n = parse_uint(negative ? value.substr(1) : value);
        if (!n || *n > 1000000) {
          valid = false;
          break;
        }
        event.device = negative ? -static_cast<int>(*n) : static_cast<int>(*n);
        continue;
      }
      auto n = parse_uint(value);
      if (!n) {
        valid = false;
        break;
      }
      if (key == "time") {
        event.time_ns = *n;
        have_time = true;
      } else if (key == "pid") {
        event.pid = static_cast<std::uint32_t>(std::min<std::uint64_t>(*n, 0xffffffffULL));
      } else if (key == "requested") {
        event.requested = *n;
      } else if (key == "quota") {
        event.quota = *n;
      } else if (key == "in_use") {
        event.in_use = *n;
      } else if (key == "suppressed") {
        event.suppressed = *n;
      }
      // Other keys are kept for newer writers: ignored.
    }
    if (!valid || !have_time) {
      report.malformed(line_no, raw, "expected time:<epoch ns> pid:<n> event:<kind> ...");
      return;
    }
    if (!refused) return;
    if (data_.refusals.size() >= limits_.max_events) {
      ++dropped_events_;
      return;
    }
    data_.refusals.push_back(std::move(event));
  }

  std::size_t dropped_events() const { return dropped_events_; }

 private:
  ProfileData& data_;
  const ProfileLimits& limits_;
  std::map<std::string, std::uint32_t> index_;
  PendingMetric pending_;
  std::size_t dropped_events_ = 0;
};

// Nearest-rank percentile of sorted values.
std::uint64_t percentile(const std::vector<std::uint64_t>& sorted, double p) {
  auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  if (rank == 0) rank = 1;
  return sorted[rank - 1];
}

}  // namespace

Result<ProfileData> load_profile(const std::string& dir_arg, const ProfileLimits& limits) {
  std::string dir = dir_arg;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  ProfileData data;
  data.dir = dir;
  auto opened_dir = fs::open_dir(dir, fs::DirTrust::Any);
  if (!opened_dir) return make_error(opened_dir.error());
  fs::UniqueFd dirfd(*opened_dir);
  Loader loader(data, limits);
  LineReporter metrics_report(dir + "/metrics.log"), timeline_report(dir + "/timeline.log"),
      events_report(dir + "/events.log");

  auto metrics =
      read_lines(dirfd.get(), dir, "metrics.log", limits, metrics_report,
                 [&](std::size_t n, std::string_view line) { loader.metrics_line(metrics_report, n, line); });
  if (!metrics) return make_error(metrics.error());
  loader.abandon_metric(metrics_report);
  auto timeline = read_lines(
      dirfd.get(), dir, "timeline.log", limits, timeline_report,
      [&](std::size_t n, std::string_view line) { loader.timeline_line(timeline_report, n, line); });
  if (!timeline) return make_error(timeline.error());
  auto events =
      read_lines(dirfd.get(), dir, "events.log", limits, events_report,
                 [&](std::size_t n, std::string_view line) { loader.events_line(events_report, n, line); });
  if (!events) return make_error(events.error());
  dirfd.reset();
  metrics_report.finish();
  timeline_report.finish();
  events_report.finish();

  data.have_metrics = *metrics;
  data.have_timeline = *timeline;
  data.have_events = *events;
  if (!data.have_metrics && !data.have_timeline) {
    return make_error("no metrics.log or timeline.log in " + dir + ": not a profile directory");
  }
  data.malformed = metrics_report.count() + timeline_report.count() + events_report.count();
  if (data.timeline_calls > data.calls.size()) {
    data.notes.push_back("timeline.log has " + std::to_string(data.timeline_calls) +
                         " calls; only the first " + std::to_string(data.calls.size()) +
                         " are used for percentiles and traces");
  }
  if (loader.dropped_events() > 0) {
    data.notes.push_back(std::to_string(loader.dropped_events()) +
                         " refused-allocation events beyond the first " + std::to_string(limits.max_events) +
                         " left out");
  }
  return data;
}

std::vector<ApiSummary> summarise(const ProfileData& data) {
  std::map<std::string, std::vector<std::uint64_t>> durations;
  for (const ProfileCall& call : data.calls) durations[data.api_names[call.api]].push_back(call.duration_ns);
  std::map<std::string, ApiSummary> by_name;
  for (const auto& [api, totals] : data.metrics) {
    ApiSummary& row = by_name[api];
    row.api = api;
    row.count = *totals.count;
    row.total_ns = *totals.total_ns;
  }
  for (auto& [api, values] : durations) {
    std::sort(values.begin(), values.end());
    ApiSummary& row = by_name[api];
    if (row.api.empty()) {
      row.api = api;
      row.count = values.size();
      for (std::uint64_t d : values) row.total_ns += d;
    }
    row.p50 = percentile(values, 50);
    row.p99 = percentile(values, 99);
  }
  std::vector<ApiSummary> rows;
  rows.reserve(by_name.size());
  for (auto& [api, row] : by_name) rows.push_back(std::move(row));
  std::sort(rows.begin(), rows.end(), [](const ApiSummary& a, const ApiSummary& b) {
    return a.total_ns != b.total_ns ? a.total_ns > b.total_ns : a.api < b.api;
  });
  return rows;
}

}  // namespace gpuslice::cli
