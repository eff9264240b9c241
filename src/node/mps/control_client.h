// Talking to nvidia-cuda-mps-control: `-d` starts the control daemon (the launched process exits
// once the daemon runs in the background); without arguments it is the client of the daemon named
// by CUDA_MPS_PIPE_DIRECTORY, reading one command a line on stdin (get_server_list, quit,
// start_server -uid N, set_default_active_thread_percentage P, ...) and printing the answers.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace gpuslice::node::mps {

struct ControlEnv {
  std::string binary;  // resolved path of nvidia-cuda-mps-control
  std::string pipe_dir, log_dir;
};

struct ControlOutput {
  int exit_code = 0;  // 128+N when ended by signal N
  std::string out, err;
};

// Runs `binary args...` with CUDA_MPS_PIPE_DIRECTORY/CUDA_MPS_LOG_DIRECTORY set, `input` on its stdin,
// and waits at most `timeout` for it to exit (then kills it: an error). Output is bounded. With
// `output_file`, stdout and stderr go to that file instead (read back into `err`): a daemon that
// keeps them must not write into a pipe nobody reads any more.
Result<ControlOutput> run_control(const ControlEnv& env, const std::vector<std::string>& args,
                                  std::string_view input, std::chrono::milliseconds timeout,
                                  const std::string& output_file = {});

// `binary -d`, its output in log_dir/control-start.log; an error carries its exit status and what it printed.
Result<bool> start_daemon(const ControlEnv& env, std::chrono::milliseconds timeout);

// One command through the client; the answer, or an error with what it printed.
Result<std::string> send_command(const ControlEnv& env, std::string_view command,
                                 std::chrono::milliseconds timeout);

// The pids get_server_list printed (one a line); lines that are not a pid are skipped.
std::vector<int> parse_server_list(std::string_view output);

// The first line of `text` with control characters replaced, at most `max` bytes: for messages.
std::string one_line(std::string_view text, std::size_t max = 300);

}  // namespace gpuslice::node::mps
