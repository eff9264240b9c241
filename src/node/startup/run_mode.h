// What every mode of gpuslice-node does before its own work, in one place: the end of a parse that
// stops the program (help, a usage error), the log level, the stop signals, the GPUs (NVML or
// --fake-gpus) and the node's MPS control daemon.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "common/result.h"
#include "node/gpus/gpu_source.h"
#include "node/mps/manager_thread.h"
#include "node/startup/flag_table.h"

#ifndef GPUSLICE_VERSION
#define GPUSLICE_VERSION "dev"
#endif

namespace gpuslice::node {

// The program's own usage: its modes (serve, dra, webhook) and version.
std::string usage_main();

// After a mode's flags are parsed: the exit code when the program ends here (help: 0, a usage error:
// 2, stop signals that cannot be caught: 1), else nothing, with the log level set and SIGTERM and
// SIGINT caught for wait_for_stop. `who` prefixes the usage error ("gpuslice-node serve").
std::optional<int> begin_mode(const ParseOutcome& parsed, const char* who, const std::string& log_level);

// True when SIGTERM or SIGINT arrived (since begin_mode) within `timeout`.
bool wait_for_stop(std::chrono::milliseconds timeout);

// The GPUs a mode reads: N fake ones when `fake_gpus` is given (NxSIZE), else NVML from `nvml_library`.
Result<std::unique_ptr<GpuSource>> open_gpus(const std::string& nvml_library, const std::string& fake_gpus);

// The node's MPS control daemon when --mps is given (else null); `pipe_dir` is set to the directory
// handed to containers. With fake GPUs the manager does not ask NVML for compute modes.
std::unique_ptr<mps::ManagerThread> start_mps(const MpsOptions& mps, const std::string& nvml_library,
                                              const std::string& fake_gpus, std::string& pipe_dir);

}  // namespace gpuslice::node
