// What decides, before a control daemon is started, that MPS cannot run here; each answer is the
// reason users read in `refused: <reason>`.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"

namespace gpuslice::node::mps {

// What NVML says of one GPU, as far as MPS cares.
struct DeviceMode {
  enum class Compute { Default, ExclusiveThread, Prohibited, ExclusiveProcess };
  unsigned index = 0;
  bool mig = false;  // MIG mode currently on
  Compute compute = Compute::Default;
  std::vector<unsigned> compute_pids;  // processes holding a context on it now
};
using DeviceModeProbe = std::function<Result<std::vector<DeviceMode>>()>;

// NVML's view through `library` (dlopen; "libnvidia-ml.so.1" normally).
DeviceModeProbe nvml_device_modes(std::string library);

// Why these GPUs cannot be served by a new control daemon, or nothing:
//  - MIG mode on (MPS over MIG needs one daemon per MIG instance, which gpuslice does not manage);
//  - compute mode prohibited (no context at all);
//  - exclusive-process mode with a process already holding the GPU (our server could not open it).
// Exclusive-process alone is fine: NVIDIA recommends it under MPS, only the server then holds the GPU.
std::optional<std::string> device_refusal(const std::vector<DeviceMode>& devices);

// `name` if it contains a slash (checked executable), else the first executable match on `path_env`
// (":"-separated, as PATH). An error says what was looked for and where.
Result<std::string> find_binary(const std::string& name, const char* path_env);

// The pid in `pipe_dir`/nvidia-cuda-mps-control.pid when that process is alive (not a zombie).
std::optional<int> live_control_pid(const std::string& pipe_dir);

// True while `pid` exists and has not ended (a zombie counts as ended).
bool process_alive(int pid);

}  // namespace gpuslice::node::mps
