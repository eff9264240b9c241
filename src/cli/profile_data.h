// The files of a profile directory (docs/profiling.md), read into memory with bounds: a hostile or
// enormous directory costs at most a fixed amount of memory and never blocks the reader.
//   metrics.log:  per API "name:<api>", "count:<n>", "burst:<total ns>" (one per line, or several
//                 key:value tokens on one line)
//   timeline.log: one call per line, "name:<api> start:<epoch ns> burst:<ns>", optionally followed by
//                 "pid:<n> tid:<n>" (read when present)
//   events.log:   refused allocations, "time:<epoch ns> pid:<n> event:allocation_refused device:<d>
//                 requested:<bytes> quota:<bytes> in_use:<bytes> suppressed:<n> top:<free text>"
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"

namespace gpuslice::cli {

struct ProfileLimits {
  std::size_t max_line_bytes = 4096;
  std::size_t max_apis = 4096;        // distinct API names
  std::size_t max_calls = 2'000'000;  // timeline calls kept for percentiles and traces
  std::size_t max_events = 100'000;   // refused-allocation events kept
  std::uint64_t max_file_bytes = 16ULL << 30;
};

struct ProfileCall {
  std::uint32_t api = 0;  // index into ProfileData::api_names
  std::uint64_t start_ns = 0;
  std::uint64_t duration_ns = 0;
  std::optional<std::uint32_t> pid, tid;
};

struct RefusedAllocation {
  std::uint64_t time_ns = 0;
  std::uint32_t pid = 0;
  int device = -1;
  std::uint64_t requested = 0, quota = 0, in_use = 0, suppressed = 0;
  std::string top;
};

struct ApiTotals {
  std::optional<std::uint64_t> count;     // from metrics.log
  std::optional<std::uint64_t> total_ns;  // from metrics.log
};

struct ProfileData {
  std::string dir;
  bool have_metrics = false, have_timeline = false, have_events = false;
  std::vector<std::string> api_names;        // index = ProfileCall::api
  std::map<std::string, ApiTotals> metrics;  // by API name
  std::vector<ProfileCall> calls;            // timeline order as read (at most max_calls)
  std::uint64_t timeline_calls = 0;          // all valid timeline lines, kept or not
  std::vector<RefusedAllocation> refusals;
  std::size_t malformed = 0;
  std::vector<std::string> notes;  // limits that were reached, for stderr
};

// Reads DIR. Errors: DIR is not a directory, a file in it exists but is not a regular file (or is a
// symlink), or none of metrics.log / timeline.log exists. Malformed lines are reported on stderr
// (file and line, at most 20 per file), skipped and counted.
Result<ProfileData> load_profile(const std::string& dir, const ProfileLimits& limits = {});

// Per-API summary rows, sorted by total time (descending), then name.
struct ApiSummary {
  std::string api;
  std::uint64_t count = 0;
  std::uint64_t total_ns = 0;
  std::optional<std::uint64_t> p50, p99;
};
std::vector<ApiSummary> summarise(const ProfileData& data);

}  // namespace gpuslice::cli
