#include "node/startup/run_mode.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/log.h"
#include "config/settings.h"

namespace gpuslice::node {
namespace {

int g_stop_pipe[2] = {-1, -1};

void note_stop(int) {
  const char byte = 1;
  const int saved = errno;
  (void)!::write(g_stop_pipe[1], &byte, 1);
  errno = saved;
}

void apply_log_level(const std::string& text) {
  log::set_level(log::Level::Info);
  if (text.empty()) return;
  if (auto level = config::parse_log_level(text)) log::set_level(*level);
}

// SIGTERM and SIGINT through a handler and a pipe, not a blocked mask: threads started before this
// point (gRPC's, at static initialisation) do not block them, and one of them would take the
// signal's default action and kill the daemon before it lets go of its sockets and Lease.
bool catch_stop_signals() {
  if (::pipe2(g_stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    GS_LOG(Error, "pipe2: %s", std::strerror(errno));
    return false;
  }
  struct sigaction on_stop {};
  on_stop.sa_handler = note_stop;
  sigemptyset(&on_stop.sa_mask);
  on_stop.sa_flags = SA_RESTART;
  ::sigaction(SIGTERM, &on_stop, nullptr);
  ::sigaction(SIGINT, &on_stop, nullptr);
  return true;
}

}  // namespace

std::string usage_main() {
  return "gpuslice-node: the gpuslice node daemon\n"
         "\n"
         "usage: gpuslice-node <command> [flags]\n"
         "\n"
         "commands:\n"
         "  serve     GPU discovery, /metrics, HTTP API and kubelet device plugin (DaemonSet)\n"
         "  dra       DRA kubelet plugin and ResourceSlice publisher (Kubernetes 1.32+, DaemonSet)\n"
         "  webhook   mutating admission webhook over TLS (also run as 'gpuslice-webhook')\n"
         "  index     keep the writer index of a node directory users share (plain hosts)\n"
         "  version   print the version\n"
         "\n"
         "Run 'gpuslice-node <command> --help' for the flags of a command.\n";
}

std::optional<int> begin_mode(const ParseOutcome& parsed, const char* who, const std::string& log_level) {
  if (parsed.help) {
    std::fputs(parsed.message.c_str(), stdout);
    return 0;
  }
  if (!parsed.message.empty()) {
    std::fprintf(stderr, "%s: %s\n", who, parsed.message.c_str());
    return 2;
  }
  apply_log_level(log_level);
  if (!catch_stop_signals()) return 1;
  return std::nullopt;
}

bool wait_for_stop(std::chrono::milliseconds timeout) {
  pollfd stop{g_stop_pipe[0], POLLIN, 0};
  const int ready = ::poll(&stop, 1, static_cast<int>(timeout.count()));
  return ready > 0 && (stop.revents & POLLIN) != 0;
}

Result<std::unique_ptr<GpuSource>> open_gpus(const std::string& nvml_library, const std::string& fake_gpus) {
  return fake_gpus.empty() ? open_nvml(nvml_library) : fake_gpu_source(fake_gpus);
}

std::unique_ptr<mps::ManagerThread> start_mps(const MpsOptions& mps, const std::string& nvml_library,
                                              const std::string& fake_gpus, std::string& pipe_dir) {
  if (!mps.enabled) return nullptr;
  auto options = mps::node_manager_options(mps.root, mps.binary, fake_gpus.empty() ? nvml_library : "");
  pipe_dir = options.paths.pipe_dir();
  return std::make_unique<mps::ManagerThread>(std::move(options));
}

}  // namespace gpuslice::node
