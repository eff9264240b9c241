// gpuslice profile DIR: summarises the profile files the interposer writes (see profile_data.h and
// docs/profiling.md), and writes them as a Chrome trace (--trace) or a self-contained page (--html).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "cli/profile_data.h"
#include "cli/profile_html.h"
#include "cli/profile_trace.h"
#include "cli/terminal_text.h"
#include "common/errno_text.h"

namespace gpuslice::cli {
namespace {

// API names come from files anyone in the container may write: bounded in tables.
constexpr std::size_t kApiColumnWidth = 48;

const CommandSpec& profile_spec() {
  static const CommandSpec spec{
      "profile",
      "[options] DIR",
      "Summarise the per-API profile in DIR (metrics.log, timeline.log): count, total, mean, p50, p99.",
      "Sorted by total time. p50/p99 need timeline.log. DIR is what PFLOG or\n"
      "GPUSLICE_PROFILE_DIR named. Malformed lines are reported on stderr and skipped.\n"
      "--trace writes Chrome trace-event JSON (Perfetto and chrome://tracing open it):\n"
      "one event per call, memcpy directions and refused allocations (events.log) as their own events.\n"
      "--html writes one self-contained page: the table, time per API and a timeline.\n"
      "Files in DIR that are symlinks, FIFOs, devices or directories are refused; lines are limited to\n"
      "4096 bytes, and at most 2,000,000 calls are kept for percentiles, traces and pages.\n"
      "Exit status: 0, 1 if DIR is not a profile directory or a file cannot be read or written, 2 for\n"
      "usage errors.",
      {{"--json", "", "machine-readable summary on stdout"},
       {"--trace", "FILE", "write the calls as Chrome trace-event JSON to FILE ('-': stdout)"},
       {"--html", "FILE", "write a self-contained HTML page to FILE ('-': stdout)"}}};
  return spec;
}

// Writes `text` to FILE (created or truncated, not through a symlink) or stdout for "-".
Result<bool> write_output(const std::string& path, const std::string& text) {
  if (path == "-") {
    if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size())
      return make_error("cannot write stdout");
    return true;
  }
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return make_error("cannot create " + path + ": " + fs::errno_text(errno));
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      return make_error("cannot write " + path + ": " + fs::errno_text(err));
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) return make_error("cannot write " + path + ": " + fs::errno_text(errno));
  return true;
}

nlohmann::json summary_json(const ProfileData& data, const std::vector<ApiSummary>& rows) {
  nlohmann::json apis = nlohmann::json::array();
  for (const ApiSummary& r : rows) {
    double mean = r.count > 0 ? static_cast<double>(r.total_ns) / static_cast<double>(r.count) : 0.0;
    apis.push_back({{"api", r.api},
                    {"count", r.count},
                    {"total_ns", r.total_ns},
                    {"mean_ns", mean},
                    {"p50_ns", r.p50 ? nlohmann::json(*r.p50) : nlohmann::json(nullptr)},
                    {"p99_ns", r.p99 ? nlohmann::json(*r.p99) : nlohmann::json(nullptr)}});
  }
  return {{"dir", data.dir},
          {"malformed_lines", data.malformed},
          {"timeline_calls", data.timeline_calls},
          {"refused_allocations", data.refusals.size()},
          {"apis", std::move(apis)}};
}

void print_table(const ProfileData& data, const std::vector<ApiSummary>& rows) {
  std::printf("Profile %s: %s, %s\n\n", terminal_text(data.dir, 200).c_str(),
              data.have_metrics ? "metrics.log" : "no metrics.log",
              data.have_timeline
                  ? ("timeline.log with " + std::to_string(data.timeline_calls) + " calls").c_str()
                  : "no timeline.log");
  Table table({"API", "COUNT", "TOTAL", "MEAN", "P50", "P99"}, {false, true, true, true, true, true});
  for (const ApiSummary& r : rows) {
    std::string mean =
        r.count > 0 ? format_duration_ns(static_cast<double>(r.total_ns) / static_cast<double>(r.count))
                    : std::string("-");
    table.add_row({terminal_text(r.api, kApiColumnWidth), std::to_string(r.count),
                   format_duration_ns(static_cast<double>(r.total_ns)), mean,
                   r.p50 ? format_duration_ns(static_cast<double>(*r.p50)) : "-",
                   r.p99 ? format_duration_ns(static_cast<double>(*r.p99)) : "-"});
  }
  table.print(stdout);
  if (!data.refusals.empty()) std::printf("\n%zu refused allocations (events.log)\n", data.refusals.size());
}

}  // namespace

int cmd_profile(int argc, char** argv) {
  const CommandSpec& spec = profile_spec();
  ParsedArgs args;
  if (auto done = parse_command(spec, argc, argv, args)) return *done;
  if (args.positionals.size() != 1) return usage_error(spec, "expected exactly one directory");
  auto trace_path = args.value("--trace");
  auto html_path = args.value("--html");
  int to_stdout = (trace_path == "-") + (html_path == "-") + (args.has("--json") ? 1 : 0);
  if (to_stdout > 1) return usage_error(spec, "only one of --json, --trace - and --html - can use stdout");

  auto loaded = load_profile(args.positionals[0]);
  if (!loaded) return runtime_error(spec.name, loaded.error());
  const ProfileData& data = *loaded;
  for (const std::string& note : data.notes) std::fprintf(stderr, "gpuslice profile: %s\n", note.c_str());
  std::vector<ApiSummary> rows = summarise(data);

  int status = kExitOk;
  if (trace_path) {
    std::string text =
        chrome_trace(data).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    if (auto written = write_output(*trace_path, text); !written)
      status = runtime_error(spec.name, written.error());
  }
  if (html_path) {
    if (auto written = write_output(*html_path, profile_html(data)); !written) {
      status = runtime_error(spec.name, written.error());
    }
  }
  if (args.has("--json")) {
    std::printf(
        "%s\n",
        summary_json(data, rows).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else if (to_stdout == 0) {
    print_table(data, rows);
  }
  if (data.malformed > 0)
    std::fprintf(stderr, "gpuslice profile: %zu malformed lines skipped\n", data.malformed);
  std::fflush(stdout);
  return status;
}

}  // namespace gpuslice::cli
