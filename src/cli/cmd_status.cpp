// gpuslice status / top: what a container's state file says (after returning the bytes of
// processes that died), or every container of the node (--node: a node root, or the daemon's API).
// `top` on a terminal is a full-screen view (top_view.h); otherwise it refreshes the plain output.
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/defaults.h"
#include "cli/dra_text.h"
#include "cli/status_source.h"
#include "cli/status_text.h"
#include "cli/top_view.h"
#include "common/clock.h"
#include "node/mps/mps_report_json.h"
#include "status/status_json.h"

namespace gpuslice::cli {
namespace {

volatile sig_atomic_t g_interrupted = 0;

void on_interrupt(int) { g_interrupted = 1; }

std::vector<OptionSpec> status_options(bool watch_flag) {
  std::vector<OptionSpec> options = {
      {"--shared-dir", "DIR", "state directory (default: $GPUSLICE_SHARED_DIR, else /tmp/gpuslice-<uid>)"},
      {"--file", "PATH", "state file itself (default: DIR/state, or $CUDA_DEVICE_MEMORY_SHARED_CACHE)"},
      {"--node", "ROOT",
       "every container of the node (ROOT/containers/*); without ROOT the daemon's API if it answers, "
       "else $GPUSLICE_NODE_ROOT or /var/lib/gpuslice",
       true},
      {"--api", "URL", "every container of the node from the daemon's API, e.g. http://127.0.0.1:9410"},
      {"--token-file", "FILE", "bearer token for --api (default: $GPUSLICE_NODE_TOKEN_FILE)"},
      {"--json", "", "machine-readable output (one JSON document per refresh; schema in docs/api.md)"},
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
      "container consumed. When watching, NOW is the device's compute rate over the last interval\n"
      "and REFUSED/INT the allocations refused in it.\n"
      "--node without ROOT asks the node daemon first: GET /api/v1/status at $GPUSLICE_NODE_LISTEN\n"
      "(default 0.0.0.0:9410, reached on 127.0.0.1) with the token of $GPUSLICE_NODE_TOKEN_FILE\n"
      "(default /etc/gpuslice/node-token), when that file is readable; when no daemon accepts within\n"
      "0.3 s it reads the node root itself. --json names the one used as \"source\".\n"
      "Exit status: 0, 1 if the state file (or node root, or API) cannot be read, 2 for usage errors.",
      status_options(true)};
  return spec;
}

const CommandSpec& top_spec() {
  static const CommandSpec spec{
      "top", "[options]",
      "Live view of 'gpuslice status': full-screen on a terminal (q quits, s sorts, d switches device, h "
      "helps).",
      "On a terminal: header with time, GPUs, driver and CUDA version; per device a memory bar\n"
      "(used/quota, and the card's total), the compute rate of the last interval against the\n"
      "limit ('sm 23%/30%') and the allocations refused in it; process rows (pid, host pid,\n"
      "memory, current share of the device). Not a terminal, or --json: the plain output of\n"
      "'gpuslice status' once per interval.\n"
      "Without --file, --shared-dir or --api, top shows every container of the node when the node\n"
      "root ($GPUSLICE_NODE_ROOT, else /var/lib/gpuslice) is readable, else the container's own state.\n"
      "The node is read as 'status --node' reads it: from the daemon's API when it answers.",
      status_options(false)};
  return spec;
}

// One refresh. Returns false (after printing why) when the source is unusable.
// `prefetched`: this refresh's view, already read while choosing the source.
bool show_once(const StatusSource& source, bool node, bool json, bool clear_screen,
               status::RateTracker* rates, std::string_view command,
               std::optional<StatusView> prefetched = std::nullopt) {
  StatusView view = prefetched ? std::move(*prefetched) : read_status(source);
  if (rates != nullptr) {
    std::uint64_t now = monotonic_ns();
    for (auto& c : view.containers) rates->update(c, now);
  }
  if (clear_screen) std::fputs("\033[H\033[2J", stdout);
  if (!view.error.empty() && (!node || view.containers.empty())) {
    runtime_error(command, view.error);
    return false;
  }
  if (!view.error.empty()) runtime_error(command, view.error);
  if (json) {
    if (node) {
      nlohmann::json containers = nlohmann::json::array();
      for (const auto& c : view.containers) containers.push_back(status::to_json(c));
      nlohmann::json doc = {{"schema_version", status::kSchemaVersion},
                            {"source", source.kind == StatusSource::Kind::Api ? source.api.url : source.path},
                            {"containers", std::move(containers)}};
      if (view.mps) doc["mps"] = node::mps::report_json(*view.mps);
      if (view.dra) doc["dra"] = dra_json(*view.dra);
      std::printf("%s\n", status::dump(doc).c_str());
    } else {
      std::printf("%s\n", status::dump(status::to_json(view.containers.front())).c_str());
    }
  } else {
    print_view_text(view, node, stdout);
  }
  std::fflush(stdout);
  return true;
}

void sleep_interruptibly(std::uint64_t ns) {
  timespec remaining{static_cast<time_t>(ns / 1000000000ULL), static_cast<long>(ns % 1000000000ULL)};
  while (!g_interrupted && nanosleep(&remaining, &remaining) != 0) {
  }
}

// On a node (the daemon's root is readable), top shows every container unless told otherwise.
bool node_root_readable() {
  std::string containers = env_or("GPUSLICE_NODE_ROOT", kDefaultNodeRoot) + "/containers";
  return access(containers.c_str(), R_OK | X_OK) == 0;
}

int status_main(const CommandSpec& spec, int argc, char** argv, bool is_top) {
  ParsedArgs args;
  if (auto done = parse_command(spec, argc, argv, args)) return *done;
  if (!args.positionals.empty())
    return usage_error(spec, "unexpected argument '" + args.positionals[0] + "'");
  int sources = (args.has("--file") ? 1 : 0) + (args.has("--shared-dir") ? 1 : 0) +
                (args.has("--node") ? 1 : 0) + (args.has("--api") ? 1 : 0);
  if (sources > 1) return usage_error(spec, "give only one of --file, --shared-dir, --node and --api");
  if (args.has("--token-file") && !args.has("--api")) return usage_error(spec, "--token-file needs --api");
  bool watch = is_top || args.has("--watch");
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

  StatusSource source;
  std::optional<StatusView> first;  // read while choosing the source
  bool node = false;
  if (auto url = args.value("--api")) {
    node = true;
    source.kind = StatusSource::Kind::Api;
    source.api.url = *url;
    source.api.token_file = args.value("--token-file").value_or(env_or("GPUSLICE_NODE_TOKEN_FILE", ""));
    if (source.api.token_file.empty()) {
      return usage_error(spec, "--api needs --token-file FILE (or $GPUSLICE_NODE_TOKEN_FILE)");
    }
  } else if (args.has("--node") || (is_top && sources == 0 && node_root_readable())) {
    node = true;
    source.kind = StatusSource::Kind::NodeRoot;
    if (std::string root = args.value("--node").value_or(""); !root.empty()) {
      source.path = absolute_path(root);
    } else {
      NodeSourceChoice choice =
          choose_node_source(absolute_path(env_or("GPUSLICE_NODE_ROOT", kDefaultNodeRoot)));
      if (!choice.note.empty()) runtime_error(spec.name, choice.note);
      source = std::move(choice.source);
      first = std::move(choice.first);
    }
  } else {
    auto path = resolve_state_file(args);
    if (!path) return runtime_error(spec.name, path.error());
    source.path = *path;
  }
  bool json = args.has("--json");

  if (!watch) {
    return show_once(source, node, json, false, nullptr, spec.name, std::move(first)) ? kExitOk
                                                                                      : kExitRuntime;
  }

  if (is_top && !json && isatty(STDOUT_FILENO) == 1 && top_view_available()) {
    // A source that cannot be read at the start is an error, as for the plain output.
    StatusView start = first ? std::move(*first) : read_status(source);
    if (!start.error.empty() && start.containers.empty()) return runtime_error(spec.name, start.error);
    return run_top_view({source, node, interval_ns, iterations});
  }

  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  bool clear = !json && isatty(STDOUT_FILENO) == 1;
  status::RateTracker rates;
  // A missing file at the start is an error; later it may come and go with the container.
  if (!show_once(source, node, json, clear, &rates, spec.name, std::move(first))) return kExitRuntime;
  for (std::uint64_t done = 1; !g_interrupted && (iterations == 0 || done < iterations); ++done) {
    sleep_interruptibly(interval_ns);
    if (g_interrupted) break;
    show_once(source, node, json, clear, &rates, spec.name);
  }
  return kExitOk;
}

}  // namespace

int cmd_status(int argc, char** argv) { return status_main(status_spec(), argc, argv, false); }
int cmd_top(int argc, char** argv) { return status_main(top_spec(), argc, argv, true); }

}  // namespace gpuslice::cli
