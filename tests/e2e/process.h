// Running real programs for end-to-end tests: a child with an exact environment, its output
// captured, or left running in the background to be inspected and killed.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace gpuslice::test {

using Env = std::map<std::string, std::string>;

struct Outcome {
  int exit_code = -1;  // -signal when killed
  std::string out;
  std::string err;
  // key=value lines of stdout (the last value of a repeated key wins)
  std::map<std::string, std::string> values;
  long long num(const std::string& key) const;
  bool has(const std::string& key) const { return values.count(key) != 0; }
};

// Runs argv with exactly `env`, waits (killing it after timeout_s) and captures output.
Outcome run(const std::vector<std::string>& argv, const Env& env, int timeout_s = 60);

// A child left running; its stdout goes to a file that can be read while it runs.
class Background {
 public:
  // stdout goes to `out_file`, and stderr too with `with_stderr` (the library's log lines).
  Background(const std::vector<std::string>& argv, const Env& env, const std::string& out_file,
             bool with_stderr = false);
  ~Background();
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;

  pid_t pid() const { return pid_; }
  // Waits until stdout contains `needle` (true) or the timeout passes (false).
  bool wait_for_output(const std::string& needle, int timeout_ms);
  std::string output() const;
  void kill(int sig = SIGKILL);
  int wait();  // exit code, or -signal

 private:
  pid_t pid_ = -1;
  std::string out_file_;
  bool reaped_ = false;
  int status_ = 0;
};

std::map<std::string, std::string> parse_values(const std::string& text);
std::string make_temp_dir(const char* prefix);
void remove_tree(const std::string& path);

// One "container" `name` of a node under `dir`: its own shared dir (dir/name); the limits file, node
// dir and simulated driver (`mock_dir`, one GPU with the mock's default memory, its state in
// dir/mock) that every container under `dir` shares; the library `preload` when not null.
// Sanitizer builds: the ASan runtime comes with libgpuslice.so, not first in line; the caller's
// UBSAN_OPTIONS are kept.
Env node_container_env(const std::string& dir, const std::string& name, const char* mock_dir,
                       const char* preload);

// What a simulated "container" under `dir` needs: the simulated driver (`mock_dir`) with `devices`
// GPUs of 16 GiB, each context charged `context_bytes`, its own shared, node, limits and mock state
// paths (node_container_env's, its shared dir dir/shared), and the library `preload` when not null.
Env mock_container_env(const std::string& dir, int devices, long long context_bytes, const char* mock_dir,
                       const char* preload);

}  // namespace gpuslice::test
