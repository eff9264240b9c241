// gpuslice status / top: what a container's state file says, after returning the bytes of
// processes that died. `top` (or `status --watch`) refreshes until interrupted.
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "shared_state/layout.h"
#include "shared_state/ledger.h"

namespace gpuslice::cli {
namespace {

volatile sig_atomic_t g_interrupted = 0;

void on_interrupt(int) { g_interrupted = 1; }

std::vector<OptionSpec> status_options(bool watch_flag) {
  std::vector<OptionSpec> options = {
      {"--shared-dir", "DIR", "state directory (default: $GPUSLICE_SHARED_DIR, else /tmp/gpuslice)"},
      {"--file", "PATH", "state file itself (default: DIR/state, or $CUDA_DEVICE_MEMORY_SHARED_CACHE)"},
      {"--json", "", "machine-readable output (one JSON document per refresh)"},
  };
  if (watch_flag) options.push_back({"--watch", "", "refresh until interrupted (same as gpuslice top)"});
  options.push_back({"--interval", "SECONDS", "refresh interval when watching (default 1, minimum 0.01)"});
  options.push_back({"--iterations", "N", "stop after N refreshes when watching"});
  return options;
}

const CommandSpec& status_spec() {
  static const CommandSpec spec{
      "status", "[options]", "Show each device's quota, usage and compute limit, and the processes using it.",
      "Processes that died are reaped (their memory returned) before the state is shown.\n"
      "Columns: DEV is the device record (what 'gpuslice set --device' takes), CUDA the index in\n"
      "the process that first used it; SHARE is the process's part of the device time the\n"
      "container consumed.\n"
      "Exit status: 0, 1 if the state file is missing or damaged, 2 for usage errors.",
      status_options(true)};
  return spec;
}

const CommandSpec& top_spec() {
  static const CommandSpec spec{"top", "[options]", "Live view of 'gpuslice status'; Ctrl-C to quit.", "",
                                status_options(false)};
  return spec;
}

std::string percent_text(std::uint64_t part, std::uint64_t whole) {
  if (whole == 0 || whole == shm::kUnlimited) return "-";
  char text[16];
  std::snprintf(text, sizeof text, "%.0f%%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
  return text;
}

std::uint64_t device_busy_total(const shm::Snapshot& snap, std::size_t d) {
  std::uint64_t total = 0;
  for (const auto& p : snap.processes) total += d < p.busy_ns_by_device.size() ? p.busy_ns_by_device[d] : 0;
  return total;
}

void print_table(const shm::Snapshot& snap, std::FILE* out) {
  std::fprintf(out, "State file: %s\n\n", snap.path.c_str());
  if (snap.devices.empty()) {
    std::fprintf(out, "No device is attached yet (no limited process has used a GPU).\n");
  } else {
    Table devices({"DEV", "CUDA", "UUID", "QUOTA", "USED", "USE%", "COMPUTE", "REFUSED"},
                  {true, true, false, true, true, true, true, true});
    for (const auto& d : snap.devices) {
      devices.add_row(
          {std::to_string(d.record), std::to_string(d.index), d.uuid, format_bytes(d.quota),
           format_bytes(d.used), percent_text(d.used, d.quota),
           d.compute_limit == shm::kNoComputeLimit ? "none" : std::to_string(d.compute_limit) + "%",
           std::to_string(d.refused_allocations)});
    }
    devices.print(out);
  }
  std::fprintf(out, "\n");
  if (snap.processes.empty()) {
    std::fprintf(out, "No live process.\n");
    return;
  }
  Table processes({"PID", "HOST PID", "DEV", "USED", "SHARE", "COMMAND"},
                  {true, true, true, true, true, false});
  for (const auto& p : snap.processes) {
    std::string host = p.host_pid > 0 ? std::to_string(p.host_pid) : "-";
    if (snap.devices.empty()) processes.add_row({std::to_string(p.pid), host, "-", "-", "-", p.command});
    for (std::size_t d = 0; d < snap.devices.size(); ++d) {
      std::uint64_t busy = p.busy_ns_by_device[d];
      processes.add_row({std::to_string(p.pid), host, std::to_string(snap.devices[d].record),
                         format_bytes(p.used_by_device[d]), percent_text(busy, device_busy_total(snap, d)),
                         p.command});
    }
  }
  processes.print(out);
}

std::string nullable(std::uint64_t value, std::uint64_t null_value) {
  return value == null_value ? std::string("null") : std::to_string(value);
}

std::string to_json(const shm::Snapshot& snap) {
  std::string out = "{\"path\":" + json_string(snap.path) +
                    ",\"layout_version\":" + std::to_string(shm::layout::kLayoutVersion) + ",\"devices\":[";
  for (std::size_t d = 0; d < snap.devices.size(); ++d) {
    const auto& dev = snap.devices[d];
    if (d > 0) out += ",";
    out += "{\"record\":" + std::to_string(dev.record) + ",\"cuda_index\":" + std::to_string(dev.index) +
           ",\"uuid\":" + json_string(dev.uuid) + ",\"total_bytes\":" + std::to_string(dev.total_bytes) +
           ",\"quota_bytes\":" + nullable(dev.quota, shm::kUnlimited) +
           ",\"used_bytes\":" + std::to_string(dev.used) +
           ",\"compute_limit_percent\":" + nullable(dev.compute_limit, shm::kNoComputeLimit) +
           ",\"refused_allocations\":" + std::to_string(dev.refused_allocations) + "}";
  }
  out += "],\"processes\":[";
  for (std::size_t i = 0; i < snap.processes.size(); ++i) {
    const auto& p = snap.processes[i];
    if (i > 0) out += ",";
    out += "{\"pid\":" + std::to_string(p.pid) +
           ",\"host_pid\":" + (p.host_pid > 0 ? std::to_string(p.host_pid) : "null") +
           ",\"command\":" + json_string(p.command) + ",\"devices\":[";
    for (std::size_t d = 0; d < snap.devices.size(); ++d) {
      std::uint64_t total = device_busy_total(snap, d);
      char share[32] = "null";
      if (total > 0) {
        std::snprintf(share, sizeof share, "%.4f",
                      static_cast<double>(p.busy_ns_by_device[d]) / static_cast<double>(total));
      }
      if (d > 0) out += ",";
      out += "{\"record\":" + std::to_string(snap.devices[d].record) +
             ",\"used_bytes\":" + std::to_string(p.used_by_device[d]) +
             ",\"busy_ns\":" + std::to_string(p.busy_ns_by_device[d]) + ",\"compute_share\":" + share + "}";
    }
    out += "]}";
  }
  out += "]}";
  return out;
}

// One refresh: open, reap, print. Returns false (after printing why) when the file is unusable.
bool show_once(const std::string& path, bool json, bool clear_screen, std::string_view command) {
  auto opened = shm::Ledger::open(path, shm::Ledger::Mode::Observer);
  if (clear_screen) std::fputs("\033[H\033[2J", stdout);
  if (!opened) {
    runtime_error(command, opened.error());
    return false;
  }
  opened.value()->reap_dead();
  shm::Snapshot snap = opened.value()->snapshot();
  if (json) {
    std::printf("%s\n", to_json(snap).c_str());
  } else {
    print_table(snap, stdout);
  }
  std::fflush(stdout);
  return true;
}

void sleep_interruptibly(std::uint64_t ns) {
  timespec remaining{static_cast<time_t>(ns / 1000000000ULL), static_cast<long>(ns % 1000000000ULL)};
  while (!g_interrupted && nanosleep(&remaining, &remaining) != 0) {
  }
}

int status_main(const CommandSpec& spec, int argc, char** argv, bool always_watch) {
  ParsedArgs args;
  if (auto done = parse_command(spec, argc, argv, args)) return *done;
  if (!args.positionals.empty())
    return usage_error(spec, "unexpected argument '" + args.positionals[0] + "'");
  if (args.has("--file") && args.has("--shared-dir"))
    return usage_error(spec, "give --file or --shared-dir, not both");
  bool watch = always_watch || args.has("--watch");
  std::uint64_t interval_ns = 1000000000ULL;
  if (auto text = args.value("--interval")) {
    auto parsed_interval = parse_interval_seconds(*text);
    if (!parsed_interval)
      return usage_error(spec, "--interval '" + *text + "' is not a number of seconds from 0.01 to 86400");
    interval_ns = *parsed_interval;
  }
  std::uint64_t iterations = 0;  // 0: until interrupted
  if (auto text = args.value("--iterations")) {
    auto parsed_count = parse_uint(*text);
    if (!parsed_count || *parsed_count == 0)
      return usage_error(spec, "--iterations '" + *text + "' is not a positive integer");
    iterations = *parsed_count;
  }
  if (!watch && (args.has("--interval") || args.has("--iterations"))) {
    return usage_error(spec, "--interval and --iterations need --watch (or gpuslice top)");
  }
  auto path = resolve_state_file(args);
  if (!path) return runtime_error(spec.name, path.error());
  bool json = args.has("--json");

  if (!watch) return show_once(*path, json, false, spec.name) ? kExitOk : kExitRuntime;

  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  bool clear = !json && isatty(STDOUT_FILENO) == 1;
  // A missing file at the start is an error; later it may come and go with the container.
  if (!show_once(*path, json, clear, spec.name)) return kExitRuntime;
  for (std::uint64_t done = 1; !g_interrupted && (iterations == 0 || done < iterations); ++done) {
    sleep_interruptibly(interval_ns);
    if (g_interrupted) break;
    show_once(*path, json, clear, spec.name);
  }
  return kExitOk;
}

}  // namespace

int cmd_status(int argc, char** argv) { return status_main(status_spec(), argc, argv, false); }
int cmd_top(int argc, char** argv) { return status_main(top_spec(), argc, argv, true); }

}  // namespace gpuslice::cli
