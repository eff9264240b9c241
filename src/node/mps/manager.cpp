#include "node/mps/manager.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <thread>

#include "common/clock.h"
#include "common/log.h"
#include "common/safe_file.h"
#include "node/mps/mps_report_json.h"

namespace gpuslice::node::mps {

namespace {

constexpr std::uint64_t kNsPerMs = 1'000'000ULL;

std::uint64_t ms_ns(std::chrono::milliseconds ms) {
  return static_cast<std::uint64_t>(ms.count()) * kNsPerMs;
}

std::optional<int> read_started_pid(const std::string& path) {
  auto text = fs::read_small_file(path, 64, fs::DirTrust::OwnerOnly);
  if (!text) return std::nullopt;
  try {
    int pid = std::stoi(*text);
    return pid > 0 ? std::optional<int>(pid) : std::nullopt;
  } catch (...) {
    return std::nullopt;
  }
}

void write_started_pid(const std::string& path, int pid) {
  std::string dir, base;
  if (!fs::split_path(path, &dir, &base)) return;
  auto dirfd = fs::open_dir(dir, fs::DirTrust::OwnerOnly);
  if (!dirfd) return;
  fs::UniqueFd d(*dirfd);
  auto fd = fs::open_in_dir(d.get(), base.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (!fd) return;
  fs::UniqueFd f(*fd);
  const std::string text = std::to_string(pid) + "\n";
  (void)fs::pwrite_exact(f.get(), text.data(), text.size(), 0);
}

// What a dead daemon left in our own pipe directory; a new one must not find it.
void remove_leftovers(const std::string& pipe_dir) {
  if (live_control_pid(pipe_dir)) return;
  (void)::unlink((pipe_dir + "/" + kControlPidFile).c_str());
  (void)::unlink((pipe_dir + "/" + kControlPipe).c_str());
}

bool wait_until_gone(int pid, std::chrono::milliseconds timeout) {
  const std::uint64_t end = monotonic_ns() + ms_ns(timeout);
  while (process_alive(pid)) {
    if (monotonic_ns() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

}  // namespace

MpsManager::MpsManager(ManagerOptions options, NowFn now)
    : options_(std::move(options)),
      now_(now ? std::move(now) : NowFn(monotonic_ns)),
      backoff_(options_.backoff_initial) {
  env_.pipe_dir = options_.paths.pipe_dir();
  env_.log_dir = options_.paths.log_dir();
  report_.pipe_dir = env_.pipe_dir;
  report_.log_dir = env_.log_dir;
  report_.manager_pid = static_cast<int>(::getpid());
}

MpsReport MpsManager::report() const {
  std::lock_guard lock(mutex_);
  return report_;
}

void MpsManager::set_state(MpsState state, std::string reason) {
  {
    std::lock_guard lock(mutex_);
    if (report_.state != state) report_.since_ns = realtime_ns();
    report_.state = state;
    report_.reason = std::move(reason);
    if (state != MpsState::Running) report_.server_pids.clear();
    if (state == MpsState::Off || state == MpsState::Refused || state == MpsState::Restarting)
      report_.control_pid = 0;
  }
  publish();
}

void MpsManager::publish() {
  if (!options_.write_state_file) return;
  if (auto written = write_state_file(options_.paths.state_file(), report()); !written)
    GS_LOG(Warn, "mps: %s", written.error().c_str());
}

void MpsManager::refuse(std::string reason) {
  if (report().reason != reason) GS_LOG(Error, "mps: refused: %s", reason.c_str());
  next_action_ns_ = now_() + ms_ns(options_.recheck_refused);
  set_state(MpsState::Refused, std::move(reason));
}

void MpsManager::schedule_restart(std::string reason) {
  GS_LOG(Warn, "mps: %s; starting again in %lld ms", reason.c_str(),
         static_cast<long long>(backoff_.count()));
  next_action_ns_ = now_() + ms_ns(backoff_);
  backoff_ = std::min(backoff_ * 2, options_.backoff_max);
  set_state(MpsState::Restarting, std::move(reason));
}

std::optional<std::string> MpsManager::preflight() {
  auto binary = find_binary(options_.binary, std::getenv("PATH"));
  if (!binary) return binary.error();
  env_.binary = *binary;
  if (auto dirs = prepare_dirs(options_.paths); !dirs) return dirs.error();
  if (options_.device_modes) {
    auto devices = options_.device_modes();
    if (!devices) return "cannot read the GPUs' modes: " + devices.error();
    if (auto refusal = device_refusal(*devices)) return refusal;
  }
  for (const std::string& dir : options_.foreign_pipe_dirs) {
    if (dir == env_.pipe_dir) continue;
    if (auto pid = live_control_pid(dir))
      return "a control daemon gpuslice did not start is running (pid " + std::to_string(*pid) +
             ", pipe directory " + dir + "); stop it (echo quit | CUDA_MPS_PIPE_DIRECTORY=" + dir +
             " nvidia-cuda-mps-control) first";
  }
  return std::nullopt;
}

void MpsManager::attempt_start() {
  // Our pipe directory: a daemon there is ours when our record names it (an earlier run of the
  // manager started it: adopted), anyone else's otherwise.
  if (auto pid = live_control_pid(env_.pipe_dir)) {
    if (read_started_pid(options_.paths.started_file()) != pid) {
      refuse("pipe directory " + env_.pipe_dir + " is held by a control daemon gpuslice did not start (pid " +
             std::to_string(*pid) + ")");
      return;
    }
    GS_LOG(Info, "mps: adopting control daemon pid %d (started by an earlier run)", *pid);
    {
      std::lock_guard lock(mutex_);
      report_.control_pid = *pid;
    }
    ever_started_ = true;
    running_since_ns_ = now_();
    next_check_ns_ = 0;
    failed_checks_ = 0;
    set_state(MpsState::Running, {});
    watch();
    return;
  }
  remove_leftovers(env_.pipe_dir);
  set_state(MpsState::Starting, {});
  const std::uint64_t started_at = monotonic_ns();
  if (auto started = start_daemon(env_, options_.start_timeout); !started) {
    schedule_restart(started.error());
    return;
  }
  std::optional<int> pid;
  while (!(pid = live_control_pid(env_.pipe_dir))) {
    if (monotonic_ns() - started_at >= ms_ns(options_.start_timeout)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!pid) {
    schedule_restart("nvidia-cuda-mps-control -d exited but no daemon wrote " + env_.pipe_dir + "/" +
                     kControlPidFile + " within " + std::to_string(options_.start_timeout.count()) +
                     " ms (see " + env_.log_dir + "/control.log)");
    return;
  }
  write_started_pid(options_.paths.started_file(), *pid);
  {
    std::lock_guard lock(mutex_);
    report_.control_pid = *pid;
  }
  auto answer = send_command(env_, "get_server_list", options_.command_timeout);
  if (!answer) {
    ::kill(*pid, SIGKILL);
    (void)wait_until_gone(*pid, std::chrono::milliseconds(1000));
    remove_leftovers(env_.pipe_dir);
    schedule_restart("control daemon pid " + std::to_string(*pid) +
                     " started but does not answer: " + answer.error());
    return;
  }
  GS_LOG(Info, "mps: control daemon pid %d running (pipe directory %s)", *pid, env_.pipe_dir.c_str());
  {
    std::lock_guard lock(mutex_);
    report_.server_pids = parse_server_list(*answer);
  }
  ever_started_ = true;
  running_since_ns_ = now_();
  next_check_ns_ = running_since_ns_ + ms_ns(options_.check_interval);
  failed_checks_ = 0;
  set_state(MpsState::Running, {});
}

void MpsManager::watch() {
  const int pid = report().control_pid;
  const std::uint64_t now = now_();
  auto restart = [this](std::string reason) {
    {
      std::lock_guard lock(mutex_);
      ++report_.restarts;
    }
    remove_leftovers(env_.pipe_dir);
    schedule_restart(std::move(reason));
  };
  if (!process_alive(pid)) {
    restart("control daemon pid " + std::to_string(pid) + " ended");
    return;
  }
  if (now - running_since_ns_ >= ms_ns(options_.backoff_max)) backoff_ = options_.backoff_initial;
  if (now < next_check_ns_) return;
  next_check_ns_ = now + ms_ns(options_.check_interval);
  auto answer = send_command(env_, "get_server_list", options_.command_timeout);
  if (answer) {
    failed_checks_ = 0;
    bool changed = false;
    {
      std::lock_guard lock(mutex_);
      auto servers = parse_server_list(*answer);
      changed = servers != report_.server_pids || !report_.reason.empty();
      report_.server_pids = std::move(servers);
      report_.reason.clear();
    }
    if (changed) publish();
    return;
  }
  if (!process_alive(pid)) {
    restart("control daemon pid " + std::to_string(pid) + " ended");
    return;
  }
  ++failed_checks_;
  {
    std::lock_guard lock(mutex_);
    report_.reason =
        "get_server_list failed (" + std::to_string(failed_checks_) + " in a row): " + answer.error();
  }
  publish();
  if (failed_checks_ >= options_.failed_checks_to_restart) {
    ::kill(pid, SIGKILL);
    (void)wait_until_gone(pid, std::chrono::milliseconds(1000));
    restart("control daemon pid " + std::to_string(pid) + " stopped answering (killed): " + answer.error());
  }
}

void MpsManager::tick() {
  const MpsState state = report().state;
  const std::uint64_t now = now_();
  switch (state) {
    case MpsState::Off:
    case MpsState::Refused:
      if (state == MpsState::Refused && now < next_action_ns_) return;
      if (auto refusal = preflight()) {
        refuse(std::move(*refusal));
        return;
      }
      attempt_start();
      return;
    case MpsState::Restarting:
      if (now < next_action_ns_) return;
      attempt_start();
      return;
    case MpsState::Starting:
      return;
    case MpsState::Running:
      watch();
      return;
  }
}

void MpsManager::stop() {
  const int pid = report().control_pid;
  if (pid > 0 && process_alive(pid)) {
    auto quit = send_command(env_, "quit", options_.command_timeout);
    if (!quit) GS_LOG(Warn, "mps: quit: %s", quit.error().c_str());
    if (!wait_until_gone(pid, options_.stop_timeout)) {
      GS_LOG(Warn, "mps: control daemon pid %d still running after quit: SIGTERM", pid);
      ::kill(pid, SIGTERM);
      if (!wait_until_gone(pid, std::chrono::milliseconds(2000))) {
        ::kill(pid, SIGKILL);
        (void)wait_until_gone(pid, std::chrono::milliseconds(1000));
      }
    }
    GS_LOG(Info, "mps: control daemon pid %d stopped", pid);
  }
  if (ever_started_ || pid > 0) {
    remove_leftovers(env_.pipe_dir);
    (void)::unlink(options_.paths.started_file().c_str());
  }
  set_state(MpsState::Off, "stopped");
}

}  // namespace gpuslice::node::mps
