#include "cli/loader_trace.h"

#include <fcntl.h>
#include <link.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <string_view>
#include <vector>

#include "cli/terminal_text.h"
#include "common/text.h"

extern char** environ;

namespace gpuslice::cli {
namespace {

constexpr std::size_t kMaxOutputBytes = std::size_t{64} * 1024;
constexpr std::string_view kNotFound = " => not found";
constexpr std::string_view kLoadError = "error while loading shared libraries: ";

std::uint64_t now_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000 + static_cast<std::uint64_t>(ts.tv_nsec) / 1000000;
}

// PT_INTERP of the main program: the loader that started gpuslice is the one that starts the
// command (both come from this system's libc).
std::string own_loader() {
  std::string found;
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* data) -> int {
        for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
          if (info->dlpi_phdr[i].p_type == PT_INTERP) {
            *static_cast<std::string*>(data) =
                reinterpret_cast<const char*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
          }
        }
        return 1;  // the first object is the main program
      },
      &found);
  return found;
}

// This environment (LD_LIBRARY_PATH is the command's search path too) without LD_PRELOAD, whose
// entries would be traced as well, and LD_DEBUG, LD_WARN, LD_BIND_NOW and the like, which change
// what the loader prints or make it relocate.
std::vector<std::string> trace_environment() {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view entry = *e;
    if (entry.rfind("LD_", 0) == 0 && entry.rfind("LD_LIBRARY_PATH=", 0) != 0) continue;
    env.emplace_back(entry);
  }
  env.emplace_back("LD_TRACE_LOADED_OBJECTS=1");
  return env;
}

struct Traced {
  bool started = false;
  bool timed_out = false;
  bool reaped = false;
  int status = 0;
  std::string output;  // stdout and stderr together, at most kMaxOutputBytes
};

Traced run_loader(const std::string& loader, const std::string& library) {
  Traced out;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return out;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  std::vector<std::string> env = trace_environment();
  std::vector<char*> envp;
  envp.reserve(env.size() + 1);
  for (std::string& entry : env) envp.push_back(entry.data());
  envp.push_back(nullptr);
  std::string arg0 = loader, arg1 = library;
  char* argv[] = {arg0.data(), arg1.data(), nullptr};
  pid_t pid = -1;
  const int spawned = ::posix_spawn(&pid, loader.c_str(), &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (spawned != 0) {
    ::close(fds[0]);
    return out;
  }
  out.started = true;
  const std::uint64_t deadline = now_ms() + kLoaderTraceTimeoutMs;
  char buffer[4096];
  for (;;) {
    const std::uint64_t now = now_ms();
    pollfd p{fds[0], POLLIN, 0};
    const int ready = now < deadline ? ::poll(&p, 1, static_cast<int>(deadline - now)) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      out.timed_out = true;
      break;
    }
    const ssize_t n = ::read(fds[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    // Read to the end even past the cap, so that the loader never blocks on a full pipe.
    const std::size_t room = kMaxOutputBytes - out.output.size();
    out.output.append(buffer, std::min(room, static_cast<std::size_t>(n)));
  }
  ::close(fds[0]);
  // Output ends when the loader exits; one that closed it and lingers is killed at the deadline.
  while (!out.timed_out) {
    const pid_t done = ::waitpid(pid, &out.status, WNOHANG);
    if (done == pid) {
      out.reaped = true;
      return out;
    }
    if (done < 0 && errno != EINTR) return out;  // SIGCHLD ignored: the status is gone
    if (now_ms() >= deadline) {
      out.timed_out = true;
      break;
    }
    ::usleep(1000);
  }
  ::kill(pid, SIGKILL);
  while (::waitpid(pid, &out.status, 0) < 0 && errno == EINTR) {
  }
  return out;
}

// A file name or message of the loader's, at most 300 characters.
std::string shown(std::string_view text) { return terminal_text(text, 300); }

}  // namespace

Result<bool> trace_with_loader(const std::string& library) {
  const std::string loader = own_loader();
  if (loader.empty()) return true;
  const Traced traced = run_loader(loader, library);
  if (!traced.started) return true;
  if (traced.timed_out) {
    return make_error("the dynamic loader " + loader + " did not finish checking it within " +
                      std::to_string(kLoaderTraceTimeoutMs / 1000) + " s");
  }
  // Found dependencies read "\tname => /path (0x...)", missing ones "\tname => not found"; a file the
  // loader refuses ends it with "PROGRAM: error while loading shared libraries: FILE: why".
  std::vector<std::string> missing;
  std::string problem;
  std::string_view rest = traced.output;
  while (!rest.empty()) {
    const std::size_t end = std::min(rest.find('\n'), rest.size());
    const std::string_view line = text::trim(rest.substr(0, end));
    rest.remove_prefix(std::min(end + 1, rest.size()));
    if (const std::size_t at = line.find(kNotFound); at != std::string_view::npos) {
      missing.push_back(shown(line.substr(0, at)));
    } else if (problem.empty() && (line.find(kLoadError) != std::string_view::npos ||
                                   line.find("not found") != std::string_view::npos)) {
      const std::size_t why = line.find(kLoadError);
      problem = shown(why == std::string_view::npos ? line : line.substr(why + kLoadError.size()));
    }
  }
  if (!missing.empty()) {
    std::string names;
    for (const std::string& name : missing) names += (names.empty() ? "" : ", ") + name + " not found";
    return make_error(names + " (the dynamic loader would skip the library and run the command with no " +
                      "limit: install " + (missing.size() == 1 ? "it" : "them") + " or add " +
                      (missing.size() == 1 ? "its" : "their") + " directory to LD_LIBRARY_PATH)");
  }
  if (traced.reaped && WIFSIGNALED(traced.status)) {
    return make_error("the dynamic loader does not preload it: " + loader + " was killed by signal " +
                      std::to_string(WTERMSIG(traced.status)) + " while reading it");
  }
  const bool failed = traced.reaped && WIFEXITED(traced.status) && WEXITSTATUS(traced.status) != 0;
  if (!problem.empty() || failed) {
    if (problem.empty()) problem = "exit status " + std::to_string(WEXITSTATUS(traced.status));
    return make_error("the dynamic loader does not preload it: " + problem);
  }
  return true;
}

}  // namespace gpuslice::cli
