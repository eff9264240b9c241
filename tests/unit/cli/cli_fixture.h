// The fixture of the CLI tests: runs the built gpuslice binary as a user would (its own temporary
// directory, a clean environment) and collects exit status and output.
#pragma once
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "shared_state/ledger.h"
#include "temp_dir.h"

#ifdef GPUSLICE_TEST_HAVE_JSON
#include <nlohmann/json.hpp>
#endif

extern char** environ;

namespace gpuslice::cli_test {

using gpuslice::shm::Ledger;

constexpr char kUuid0[] = "GPU-00000000-1111-2222-3333-444444444444";
constexpr char kUuid1[] = "GPU-99999999-8888-7777-6666-555555555555";
constexpr std::uint64_t kGi = 1ULL << 30;

struct Outcome {
  int status = -1;  // exit code, or 128+signal
  std::string out;
  std::string err;
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.empty()) << "mkdtemp failed"; }

  // The environment of the child: ours without any gpuslice/HAMi variable, plus `extra`.
  static std::vector<std::string> child_env(const std::vector<std::string>& extra) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string entry = *e;
      if (entry.rfind("GPUSLICE_", 0) == 0 || entry.rfind("CUDA_DEVICE_", 0) == 0 ||
          entry.rfind("LD_PRELOAD=", 0) == 0)
        continue;
      env.push_back(entry);
    }
    env.insert(env.end(), extra.begin(), extra.end());
    return env;
  }

  pid_t spawn(const std::vector<std::string>& args, const std::vector<std::string>& extra_env,
              const std::string& out_path, const std::string& err_path) {
    std::vector<std::string> argv_store = {GPUSLICE_CLI_PATH};
    argv_store.insert(argv_store.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_store) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_store = child_env(extra_env);
    std::vector<char*> envp;
    for (auto& e : env_store) envp.push_back(e.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    pid_t pid = -1;
    int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    EXPECT_EQ(rc, 0) << "cannot start " << GPUSLICE_CLI_PATH;
    return rc == 0 ? pid : -1;
  }

  static int wait_status(pid_t pid) {
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return -1;
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
  }

  Outcome run(const std::vector<std::string>& args, const std::vector<std::string>& extra_env = {}) {
    std::string out_path = dir_ + "/.out", err_path = dir_ + "/.err";
    pid_t pid = spawn(args, extra_env, out_path, err_path);
    Outcome o;
    if (pid < 0) return o;
    o.status = wait_status(pid);
    o.out = read_file(out_path);
    o.err = read_file(err_path);
    unlink(out_path.c_str());
    unlink(err_path.c_str());
    return o;
  }

  // Like run(), but the child is killed after `timeout_s` and may map at most `memory_bytes`: for
  // attacks that made the old code hang or eat memory. status is kTimedOut when it was killed.
  static constexpr int kTimedOut = -2;
  Outcome run_bounded(const std::vector<std::string>& args, double timeout_s,
                      std::uint64_t memory_bytes = 2ULL << 30) {
    std::string out_path = dir_ + "/.out", err_path = dir_ + "/.err";
    std::vector<std::string> argv_store = {GPUSLICE_CLI_PATH};
    argv_store.insert(argv_store.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_store) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_store = child_env({});
    std::vector<char*> envp;
    for (auto& e : env_store) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_t pid = fork();
    if (pid == 0) {
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
      // (A sanitizer runtime reserves terabytes of shadow address space: there only time is bounded.)
      rlimit limit{memory_bytes, memory_bytes};
      setrlimit(RLIMIT_AS, &limit);
#else
      (void)memory_bytes;
#endif
      int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int in = open("/dev/null", O_RDONLY);
      dup2(out, STDOUT_FILENO);
      dup2(err, STDERR_FILENO);
      dup2(in, STDIN_FILENO);
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    Outcome o;
    if (pid < 0) return o;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    int status = 0;
    for (;;) {
      pid_t done = waitpid(pid, &status, WNOHANG);
      if (done == pid) {
        o.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        o.status = kTimedOut;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    o.out = read_file(out_path);
    o.err = read_file(err_path);
    return o;
  }

  // A state file with two devices and this process registered on it.
  std::unique_ptr<Ledger> make_state() {
    auto opened = Ledger::open(state_, Ledger::Mode::Process);
    EXPECT_TRUE(opened.ok()) << opened.error();
    auto ledger = std::move(opened).value();
    EXPECT_TRUE(ledger->register_process().ok());
    EXPECT_EQ(ledger->attach_device(kUuid0, 0, 80 * kGi, 8 * kGi, 30).value(), 0);
    EXPECT_EQ(ledger->attach_device(kUuid1, 1, 80 * kGi, gpuslice::shm::kUnlimited, 0).value(), 1);
    return ledger;
  }

  // A copy of a real, empty shared library: what `run` accepts as the library to preload.
  std::string make_library(const std::string& name) {
    std::string path = dir_ + "/" + name;
    std::filesystem::copy_file(GPUSLICE_TEST_NOOP_LIBRARY, path);
    return path;
  }

  std::string make_empty_file(const std::string& name) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path).put('\n');
    return path;
  }

  gpuslice::test::TempDir temp_{"gpuslice-cli"};  // removed with all it holds at the end
  const std::string dir_ = temp_.path();
  const std::string state_ = temp_ / "state";
};

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace gpuslice::cli_test
