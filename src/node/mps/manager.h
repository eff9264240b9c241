// Keeps one nvidia-cuda-mps-control daemon running for the node: checks that MPS can run (preflight.h),
// starts it with its pipe and log directories under the manager's root (mps_paths.h), watches it
// (the process alive, and get_server_list answering every check interval), starts it again with a
// doubling backoff when it ends or stops answering, and quits it on stop(). One owner thread calls
// tick() and stop(); report() may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "node/mps/control_client.h"
#include "node/mps/mps_paths.h"
#include "node/mps/mps_state.h"
#include "node/mps/preflight.h"

namespace gpuslice::node::mps {

struct ManagerOptions {
  std::string binary = "nvidia-cuda-mps-control";  // a name looked up on PATH, or a path
  MpsPaths paths;
  // Pipe directories where a daemon gpuslice did not start would compete for the GPUs.
  std::vector<std::string> foreign_pipe_dirs = {kNvidiaDefaultPipeDir};
  DeviceModeProbe device_modes;                    // empty: not checked (no NVML)
  std::chrono::milliseconds start_timeout{10000};  // `-d` to exit, then its pid file and first answer
  std::chrono::milliseconds command_timeout{5000};
  std::chrono::milliseconds check_interval{5000};  // get_server_list while running
  unsigned failed_checks_to_restart = 3;           // a daemon that stops answering is killed and restarted
  std::chrono::milliseconds backoff_initial{1000};
  std::chrono::milliseconds backoff_max{60000};
  std::chrono::milliseconds recheck_refused{30000};  // a refusal is checked again this often
  std::chrono::milliseconds stop_timeout{5000};      // after `quit`, before SIGTERM/SIGKILL
  bool write_state_file = true;
};

class MpsManager {
 public:
  using NowFn = std::function<std::uint64_t()>;  // monotonic ns
  explicit MpsManager(ManagerOptions options, NowFn now = {});
  ~MpsManager() = default;
  MpsManager(const MpsManager&) = delete;
  MpsManager& operator=(const MpsManager&) = delete;

  // One step of the state machine; may block up to start_timeout while a daemon starts.
  void tick();
  // Quits the daemon it runs (quit, then signals), removes its records; the state is off after.
  void stop();
  MpsReport report() const;
  const ManagerOptions& options() const { return options_; }

 private:
  void set_state(MpsState state, std::string reason);
  void attempt_start();
  void watch();
  void schedule_restart(std::string reason);
  void refuse(std::string reason);
  std::optional<std::string> preflight();
  void publish();

  ManagerOptions options_;
  NowFn now_;
  ControlEnv env_;
  std::uint64_t next_action_ns_ = 0;
  std::uint64_t next_check_ns_ = 0;
  std::uint64_t running_since_ns_ = 0;
  std::chrono::milliseconds backoff_;
  unsigned failed_checks_ = 0;
  bool ever_started_ = false;

  mutable std::mutex mutex_;  // guards report_
  MpsReport report_;
};

}  // namespace gpuslice::node::mps
