#include "process.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace gpuslice::test {

namespace {

std::vector<char*> to_c(std::vector<std::string>& owned) {
  std::vector<char*> out;
  for (auto& s : owned) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

std::vector<std::string> env_strings(const Env& env) {
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

int decode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return -WTERMSIG(status);
  return -1000;
}

}  // namespace

long long Outcome::num(const std::string& key) const {
  auto it = values.find(key);
  if (it == values.end()) return -1;
  return std::strtoll(it->second.c_str(), nullptr, 10);
}

std::map<std::string, std::string> parse_values(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    // "a=1 b=2" lines carry several pairs; a key is prefixed by the api= value when present.
    std::istringstream words(line);
    std::string word;
    std::string prefix;
    while (words >> word) {
      auto eq = word.find('=');
      if (eq == std::string::npos) continue;
      std::string key = word.substr(0, eq);
      std::string value = word.substr(eq + 1);
      if (key == "api") {
        prefix = value + ".";
        continue;
      }
      out[prefix + key] = value;
    }
  }
  return out;
}

Outcome run(const std::vector<std::string>& argv, const Env& env, int timeout_s) {
  int out_pipe[2];
  int err_pipe[2];
  if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0) return {};
  std::vector<std::string> args = argv;
  std::vector<std::string> envs = env_strings(env);
  auto c_args = to_c(args);
  auto c_env = to_c(envs);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    close(out_pipe[0]);
    close(err_pipe[0]);
    execve(c_args[0], c_args.data(), c_env.data());
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  Outcome o;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  bool killed = false;
  while (open_fds > 0) {
    int left = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now())
            .count());
    if (left <= 0 && !killed) {
      ::kill(pid, SIGKILL);
      killed = true;
    }
    if (poll(fds, 2, left > 0 ? left : 100) < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP)) == 0) continue;
      char buf[4096];
      ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      } else {
        (i == 0 ? o.out : o.err).append(buf, static_cast<std::size_t>(n));
      }
    }
  }
  int status = 0;
  waitpid(pid, &status, 0);
  o.exit_code = decode(status);
  o.values = parse_values(o.out);
  return o;
}

Background::Background(const std::vector<std::string>& argv, const Env& env, const std::string& out_file,
                       bool with_stderr)
    : out_file_(out_file) {
  std::vector<std::string> args = argv;
  std::vector<std::string> envs = env_strings(env);
  auto c_args = to_c(args);
  auto c_env = to_c(envs);
  pid_ = fork();
  if (pid_ == 0) {
    int fd = open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    if (with_stderr) dup2(fd, 2);
    execve(c_args[0], c_args.data(), c_env.data());
    _exit(127);
  }
}

Background::~Background() {
  if (!reaped_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    wait();
  }
}

std::string Background::output() const {
  std::ifstream in(out_file_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool Background::wait_for_output(const std::string& needle, int timeout_ms) {
  for (int waited = 0; waited < timeout_ms; waited += 10) {
    if (output().find(needle) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

void Background::kill(int sig) {
  if (!reaped_) ::kill(pid_, sig);
}

int Background::wait() {
  if (!reaped_) {
    waitpid(pid_, &status_, 0);
    reaped_ = true;
  }
  return decode(status_);
}

std::string make_temp_dir(const char* prefix) {
  std::string templ = std::filesystem::temp_directory_path().string() + "/" + prefix + "XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  char* dir = mkdtemp(buf.data());
  return dir == nullptr ? std::string() : std::string(dir);
}

void remove_tree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

Env node_container_env(const std::string& dir, const std::string& name, const char* mock_dir,
                       const char* preload) {
  Env env;
  env["PATH"] = "/usr/bin:/bin";
  env["LD_LIBRARY_PATH"] = mock_dir;
  if (preload != nullptr) env["LD_PRELOAD"] = preload;
  env["GPUSLICE_SHARED_DIR"] = dir + "/" + name;
  env["GPUSLICE_LIMITS_FILE"] = dir + "/limits";
  env["GPUSLICE_NODE_DIR"] = dir + "/node";
  env["GPUSLICE_MOCK_STATE_DIR"] = dir + "/mock";
  env["GPUSLICE_MOCK_DEVICES"] = "1";
  env["ASAN_OPTIONS"] = "verify_asan_link_order=0:detect_leaks=0";
  if (const char* ubsan = std::getenv("UBSAN_OPTIONS")) env["UBSAN_OPTIONS"] = ubsan;
  return env;
}

Env mock_container_env(const std::string& dir, int devices, long long context_bytes, const char* mock_dir,
                       const char* preload) {
  Env env = node_container_env(dir, "shared", mock_dir, preload);
  env["GPUSLICE_MOCK_DEVICES"] = std::to_string(devices);
  env["GPUSLICE_MOCK_MEMORY"] = std::to_string(16LL << 30);
  env["GPUSLICE_MOCK_CONTEXT_BYTES"] = std::to_string(context_bytes);
  return env;
}

}  // namespace gpuslice::test
