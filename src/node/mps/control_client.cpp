#include "node/mps/control_client.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/safe_file.h"

extern char** environ;

namespace gpuslice::node::mps {

namespace {

constexpr std::size_t kMaxOutputBytes = std::size_t{256} * 1024;

std::int64_t now_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// The caller's environment with the two MPS variables replaced.
std::vector<std::string> child_environment(const ControlEnv& env) {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view entry = *e;
    if (entry.starts_with("CUDA_MPS_PIPE_DIRECTORY=") || entry.starts_with("CUDA_MPS_LOG_DIRECTORY="))
      continue;
    out.emplace_back(entry);
  }
  out.push_back("CUDA_MPS_PIPE_DIRECTORY=" + env.pipe_dir);
  out.push_back("CUDA_MPS_LOG_DIRECTORY=" + env.log_dir);
  return out;
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 255;
}

}  // namespace

Result<ControlOutput> run_control(const ControlEnv& env, const std::vector<std::string>& args,
                                  std::string_view input, std::chrono::milliseconds timeout,
                                  const std::string& output_file) {
  fs::UniqueFd file;
  if (!output_file.empty()) {
    file.reset(::open(output_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!file.valid()) return make_error("cannot write " + output_file + ": " + std::strerror(errno));
  }
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0) return make_error(std::string("pipe: ") + std::strerror(errno));
  fs::UniqueFd in_r(in[0]), in_w(in[1]);
  if (::pipe2(out, O_CLOEXEC) != 0) return make_error(std::string("pipe: ") + std::strerror(errno));
  fs::UniqueFd out_r(out[0]), out_w(out[1]);
  if (::pipe2(err, O_CLOEXEC) != 0) return make_error(std::string("pipe: ") + std::strerror(errno));
  fs::UniqueFd err_r(err[0]), err_w(err[1]);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_r.get(), 0);
  posix_spawn_file_actions_adddup2(&actions, file.valid() ? file.get() : out_w.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, file.valid() ? file.get() : err_w.get(), 2);
  // The child starts with default signal handling and an empty mask, whatever the caller blocks.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  std::vector<std::string> argv_text = {env.binary};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  argv.reserve(argv_text.size() + 1);
  for (auto& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_text = child_environment(env);
  std::vector<char*> envp;
  envp.reserve(env_text.size() + 1);
  for (auto& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);

  pid_t pid = 0;
  int rc = posix_spawn(&pid, env.binary.c_str(), &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return make_error("cannot run " + env.binary + ": " + std::strerror(rc));
  in_r.reset();
  out_w.reset();
  err_w.reset();

  // A daemonised grandchild may keep stdout/stderr open: the end is the child's exit, not EOF.
  (void)::fcntl(in_w.get(), F_SETFL, O_NONBLOCK);
  (void)::fcntl(out_r.get(), F_SETFL, O_NONBLOCK);
  (void)::fcntl(err_r.get(), F_SETFL, O_NONBLOCK);
  ControlOutput result;
  std::size_t written = 0;
  if (input.empty()) in_w.reset();
  const std::int64_t deadline = now_ms() + timeout.count();
  int status = 0;
  bool exited = false;
  auto drain = [](int fd, std::string& into) {
    char buffer[4096];
    for (;;) {
      ssize_t n = ::read(fd, buffer, sizeof buffer);
      if (n <= 0) return;
      if (into.size() < kMaxOutputBytes)
        into.append(buffer, std::min(static_cast<std::size_t>(n), kMaxOutputBytes - into.size()));
    }
  };
  while (!exited) {
    pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      exited = true;
      break;
    }
    const std::int64_t left = deadline - now_ms();
    if (left <= 0) break;
    pollfd fds[3] = {{out_r.get(), POLLIN, 0}, {err_r.get(), POLLIN, 0}, {in_w.get(), POLLOUT, 0}};
    (void)::poll(fds, in_w.valid() ? 3 : 2, static_cast<int>(std::min<std::int64_t>(left, 20)));
    drain(out_r.get(), result.out);
    drain(err_r.get(), result.err);
    if (in_w.valid() && (fds[2].revents & (POLLOUT | POLLERR | POLLHUP)) != 0) {
      ssize_t n = ::write(in_w.get(), input.data() + written, input.size() - written);
      if (n > 0) written += static_cast<std::size_t>(n);
      if (n < 0 && errno != EAGAIN) written = input.size();
      if (written >= input.size()) in_w.reset();
    }
  }
  if (!exited) {
    ::kill(pid, SIGKILL);
    (void)::waitpid(pid, &status, 0);
    return make_error(env.binary + " did not finish within " + std::to_string(timeout.count()) + " ms");
  }
  drain(out_r.get(), result.out);
  drain(err_r.get(), result.err);
  if (file.valid()) {
    file.reset();
    if (auto text = fs::read_small_file(output_file, kMaxOutputBytes)) result.err = *text;
  }
  result.exit_code = exit_code_of(status);
  return result;
}

std::string one_line(std::string_view text, std::size_t max) {
  while (!text.empty() && (text.front() == '\n' || text.front() == ' ')) text.remove_prefix(1);
  std::string line;
  for (char c : text) {
    if (c == '\n' || line.size() >= max) break;
    const auto u = static_cast<unsigned char>(c);
    line += (u < 0x20 || u == 0x7f) ? '?' : c;
  }
  return line;
}

Result<bool> start_daemon(const ControlEnv& env, std::chrono::milliseconds timeout) {
  auto ran = run_control(env, {"-d"}, {}, timeout, env.log_dir + "/control-start.log");
  if (!ran) return make_error(ran.error());
  if (ran->exit_code != 0) {
    std::string said = one_line(ran->err.empty() ? ran->out : ran->err);
    return make_error(env.binary + " -d exited with status " + std::to_string(ran->exit_code) +
                      (said.empty() ? std::string() : ": " + said));
  }
  return true;
}

Result<std::string> send_command(const ControlEnv& env, std::string_view command,
                                 std::chrono::milliseconds timeout) {
  std::string input(command);
  input += '\n';
  auto ran = run_control(env, {}, input, timeout);
  if (!ran) return make_error(ran.error());
  if (ran->exit_code != 0) {
    std::string said = one_line(ran->err.empty() ? ran->out : ran->err);
    return make_error(std::string(command) + ": exit status " + std::to_string(ran->exit_code) +
                      (said.empty() ? std::string() : ": " + said));
  }
  return ran->out;
}

std::vector<int> parse_server_list(std::string_view output) {
  std::vector<int> pids;
  while (!output.empty()) {
    std::size_t end = output.find('\n');
    std::string_view line = output.substr(0, end);
    output = end == std::string_view::npos ? std::string_view() : output.substr(end + 1);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\r' || line.back() == '\t'))
      line.remove_suffix(1);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (line.empty() || line.size() > 9) continue;
    int pid = 0;
    bool digits = true;
    for (char c : line) {
      if (c < '0' || c > '9') {
        digits = false;
        break;
      }
      pid = pid * 10 + (c - '0');
    }
    if (digits && pid > 0) pids.push_back(pid);
  }
  return pids;
}

}  // namespace gpuslice::node::mps
