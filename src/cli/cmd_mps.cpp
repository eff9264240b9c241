// gpuslice mps serve|status|stop: the node's MPS control daemon on a plain host, without
// gpuslice-node (which runs the same manager with --mps). `serve` stays in the foreground (a
// systemd unit runs it: packaging/gpuslice-mps.service); status and stop read its state file.
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/mps_text.h"
#include "common/log.h"
#include "common/safe_file.h"
#include "config/settings.h"
#include "node/mps/manager.h"
#include "node/mps/mps_report_json.h"

namespace gpuslice::cli {

namespace {

namespace mps = node::mps;

const CommandSpec kSpec{
    "mps",
    "serve|status|stop [options]",
    "Run, inspect or stop the node's MPS control daemon (one nvidia-cuda-mps-control per node).",
    "serve   start nvidia-cuda-mps-control -d with its pipe and log directories under DIR, watch it\n"
    "        (alive, and get_server_list every --interval), start it again with a doubling backoff\n"
    "        when it ends, quit it on SIGTERM/SIGINT. Refuses, saying why, where MPS cannot run: no\n"
    "        binary, MIG mode on, a GPU in exclusive-process mode held by a process, a control\n"
    "        daemon gpuslice did not start (in DIR/pipe or in /tmp/nvidia-mps). Runs as root.\n"
    "status  the state serve (or gpuslice-node --mps) last wrote to DIR/state.json.\n"
    "stop    ends the serving manager (SIGTERM: it quits the daemon), or quits a daemon left without one.\n"
    "Clients use it with CUDA_MPS_PIPE_DIRECTORY=DIR/pipe (docs/mps.md).\n"
    "Exit status: 0; 1 if it cannot run or (status) no manager runs; 2 for usage errors.",
    {{"--dir", "DIR", "runtime directory (root-owned, 0755), default $GPUSLICE_MPS_DIR or /run/gpuslice/mps"},
     {"--binary", "PATH", "nvidia-cuda-mps-control to run (default: found on PATH)"},
     {"--nvml", "LIB", "NVML library for the MIG and compute-mode checks (default libnvidia-ml.so.1)"},
     {"--no-nvml", "", "skip the MIG and compute-mode checks"},
     {"--interval", "SECONDS", "serve: how often get_server_list checks the daemon (default 5)"},
     {"--json", "", "status: the state as JSON (docs/api.md, \"mps\")"}}};

std::string mps_root(const ParsedArgs& args) {
  if (auto dir = args.value("--dir")) return *dir;
  const char* env = std::getenv(mps::kMpsRootEnv);
  return env != nullptr && *env != '\0' ? env : mps::kDefaultMpsRoot;
}

// The manager named in a state file, when that process still runs and is a gpuslice program.
bool manager_running(int pid) {
  if (!mps::process_alive(pid)) return false;
  auto comm = fs::read_small_file("/proc/" + std::to_string(pid) + "/comm", 64);
  return !comm || comm->rfind("gpuslice", 0) == 0;
}

int serve(const ParsedArgs& args) {
  mps::ManagerOptions options;
  options.paths.root = mps_root(args);
  if (auto binary = args.value("--binary")) options.binary = *binary;
  if (!args.has("--no-nvml"))
    options.device_modes = mps::nvml_device_modes(args.value("--nvml").value_or("libnvidia-ml.so.1"));
  if (auto interval = args.value("--interval")) {
    auto ns = parse_interval_seconds(*interval);
    if (!ns)
      return usage_error(kSpec, "--interval: expected seconds (0.01 to 86400), got '" + *interval + "'");
    options.check_interval = std::chrono::milliseconds(std::max<std::uint64_t>(*ns / 1'000'000, 10));
  }
  if (::geteuid() != 0)
    std::fprintf(stderr,
                 "gpuslice mps: not root: the MPS server runs as each client's user, and %s must be root's\n",
                 options.paths.root.c_str());
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  mps::MpsManager manager(options);
  mps::MpsState shown = mps::MpsState::Off;
  std::string shown_reason;
  for (;;) {
    manager.tick();
    const mps::MpsReport r = manager.report();
    if (r.state != shown || r.reason != shown_reason) {
      print_mps_text(r, stdout);
      std::fflush(stdout);
      shown = r.state;
      shown_reason = r.reason;
    }
    timespec wait{0, 200'000'000};
    const int sig = sigtimedwait(&stop, nullptr, &wait);
    if (sig == SIGINT || sig == SIGTERM) break;
  }
  manager.stop();
  print_mps_text(manager.report(), stdout);
  return kExitOk;
}

int status(const ParsedArgs& args) {
  mps::MpsPaths paths{mps_root(args)};
  auto report = mps::read_state_file(paths.state_file());
  if (!report) {
    if (args.has("--json"))
      std::printf("%s\n", mps::report_json(mps::MpsReport{}).dump().c_str());
    else
      std::printf("MPS: off (no manager has written %s)\n", paths.state_file().c_str());
    return kExitRuntime;
  }
  const bool stale = report->state != mps::MpsState::Off && !manager_running(report->manager_pid);
  if (args.has("--json")) {
    nlohmann::json doc = mps::report_json(*report);
    doc["manager_running"] = !stale;
    std::printf("%s\n", doc.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    print_mps_text(*report, stdout);
    if (stale)
      std::printf("  stale: the manager (pid %d) that wrote this no longer runs\n", report->manager_pid);
  }
  return stale ? kExitRuntime : kExitOk;
}

int stop(const ParsedArgs& args) {
  mps::MpsPaths paths{mps_root(args)};
  auto report = mps::read_state_file(paths.state_file());
  if (report && report->state != mps::MpsState::Off && manager_running(report->manager_pid)) {
    if (::kill(report->manager_pid, SIGTERM) != 0)
      return runtime_error("mps", "cannot signal the manager pid " + std::to_string(report->manager_pid));
    for (int i = 0; i < 300 && mps::process_alive(report->manager_pid); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (mps::process_alive(report->manager_pid))
      return runtime_error(
          "mps", "the manager pid " + std::to_string(report->manager_pid) + " did not end within 15 s");
    std::printf("MPS: stopped (manager pid %d ended)\n", report->manager_pid);
    return kExitOk;
  }
  auto pid = mps::live_control_pid(paths.pipe_dir());
  if (!pid) {
    std::printf("MPS: off (no control daemon in %s)\n", paths.pipe_dir().c_str());
    return kExitOk;
  }
  auto binary =
      mps::find_binary(args.value("--binary").value_or("nvidia-cuda-mps-control"), std::getenv("PATH"));
  if (!binary) return runtime_error("mps", binary.error());
  mps::ControlEnv env{*binary, paths.pipe_dir(), paths.log_dir()};
  if (auto quit = mps::send_command(env, "quit", std::chrono::seconds(5)); !quit)
    return runtime_error("mps", quit.error());
  for (int i = 0; i < 100 && mps::process_alive(*pid); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (mps::process_alive(*pid))
    return runtime_error("mps", "control daemon pid " + std::to_string(*pid) + " did not quit");
  std::printf("MPS: stopped (control daemon pid %d quit)\n", *pid);
  return kExitOk;
}

}  // namespace

int cmd_mps(int argc, char** argv) {
  std::string sub;
  if (argc > 1 && argv[1][0] != '-') {
    sub = argv[1];
    --argc;
    ++argv;
  }
  ParsedArgs args;
  if (auto done = parse_command(kSpec, argc, argv, args)) return *done;
  if (!args.positionals.empty())
    return usage_error(kSpec, "unexpected argument '" + args.positionals[0] + "'");
  if (const char* level = std::getenv("GPUSLICE_LOG_LEVEL")) {
    if (auto parsed = config::parse_log_level(level)) log::set_level(*parsed);
  }
  if (sub == "serve") return serve(args);
  if (sub == "status") return status(args);
  if (sub == "stop") return stop(args);
  return usage_error(kSpec,
                     sub.empty() ? "expected serve, status or stop" : "unknown subcommand '" + sub + "'");
}

}  // namespace gpuslice::cli
