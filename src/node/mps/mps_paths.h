// Where the managed MPS control daemon keeps its files: one root-owned runtime directory (mode 0755,
// not writable by tenants, so nobody else can put a daemon, a pipe or a state file there) holding
// the pipe directory (CUDA_MPS_PIPE_DIRECTORY: what clients connect through, mounted into
// containers), the log directory (CUDA_MPS_LOG_DIRECTORY) and the manager's own records.
#pragma once

#include <string>

#include "common/result.h"

namespace gpuslice::node::mps {

inline constexpr const char* kDefaultMpsRoot = "/run/gpuslice/mps";
inline constexpr const char* kMpsRootEnv = "GPUSLICE_MPS_DIR";
// Where a control daemon started by hand without CUDA_MPS_PIPE_DIRECTORY keeps its pipes.
inline constexpr const char* kNvidiaDefaultPipeDir = "/tmp/nvidia-mps";
// The file the control daemon writes its pid to, in its pipe directory (NVIDIA's name).
inline constexpr const char* kControlPidFile = "nvidia-cuda-mps-control.pid";
// The control daemon's socket in its pipe directory.
inline constexpr const char* kControlPipe = "control";

struct MpsPaths {
  std::string root = kDefaultMpsRoot;

  std::string pipe_dir() const { return root + "/pipe"; }
  std::string log_dir() const { return root + "/log"; }
  // The manager's report (mps_report_json.h), read by `gpuslice mps status` and `gpuslice status --node`.
  std::string state_file() const { return root + "/state.json"; }
  // The pid of the control daemon this manager (or an earlier run of it) started: a daemon found in
  // the pipe directory is adopted only when it is that one.
  std::string started_file() const { return root + "/started.pid"; }
};

// Makes root, pipe and log directories (0755) and checks each is ours (or root's), not a symlink and
// not writable by group or others.
Result<bool> prepare_dirs(const MpsPaths& paths);

}  // namespace gpuslice::node::mps
