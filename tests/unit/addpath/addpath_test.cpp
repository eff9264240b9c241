// Runs /usr/bin/env (an uninstrumented program, as in real use) with libgpuslice-addpath.so
// preloaded and a controlled environment, and checks what main() sees.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace {

const std::string kLibrary = GPUSLICE_ADDPATH_LIBRARY;

using Environment = std::map<std::string, std::string>;

// The environment /usr/bin/env prints when started with `env` plus LD_PRELOAD of the helper
// (unless the test sets LD_PRELOAD itself, which must then name the helper).
Environment run_env(Environment env) {
  env.emplace("LD_PRELOAD", kLibrary);
  std::vector<std::string> storage;
  for (const auto& [key, value] : env) storage.push_back(key + "=" + value);
  std::vector<char*> envp;
  for (auto& entry : storage) envp.push_back(entry.data());
  envp.push_back(nullptr);

  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) {
    ADD_FAILURE() << "pipe failed";
    return {};
  }
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(pipe_fds[1], STDOUT_FILENO);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    char arg0[] = "env";
    char* argv[] = {arg0, nullptr};
    execve("/usr/bin/env", argv, envp.data());
    _exit(127);
  }
  close(pipe_fds[1]);
  std::string output;
  char buffer[4096];
  for (;;) {
    ssize_t n = read(pipe_fds[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    output.append(buffer, static_cast<std::size_t>(n));
  }
  close(pipe_fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "env failed, status " << status;

  Environment seen;
  std::size_t begin = 0;
  while (begin < output.size()) {
    std::size_t end = output.find('\n', begin);
    if (end == std::string::npos) end = output.size();
    const std::string line = output.substr(begin, end - begin);
    const std::size_t equals = line.find('=');
    if (equals != std::string::npos) seen[line.substr(0, equals)] = line.substr(equals + 1);
    begin = end + 1;
  }
  return seen;
}

std::optional<std::string> get(const Environment& env, const std::string& key) {
  auto it = env.find(key);
  if (it == env.end()) return std::nullopt;
  return it->second;
}

TEST(AddPath, LibraryIsPreloadedIntoTheChild) {
  // Without any TF_ variable the helper changes nothing, the baseline for the tests below.
  const auto seen = run_env({{"PATH", "/usr/bin:/bin"}});
  EXPECT_EQ(get(seen, "PATH"), "/usr/bin:/bin");
  EXPECT_EQ(get(seen, "LD_PRELOAD"), kLibrary);
  EXPECT_EQ(get(seen, "LD_LIBRARY_PATH"), std::nullopt);
}

TEST(AddPath, AppendsToEachVariable) {
  const auto seen = run_env({{"PATH", "/usr/bin"},
                             {"TF_PATH", "/opt/tools/bin"},
                             {"LD_LIBRARY_PATH", "/usr/lib/a"},
                             {"TF_LD_LIBRARY_PATH", "/opt/lib1:/opt/lib2"},
                             {"TF_LD_PRELOAD", "/opt/hook.so"}});
  EXPECT_EQ(get(seen, "PATH"), "/usr/bin:/opt/tools/bin");
  EXPECT_EQ(get(seen, "LD_LIBRARY_PATH"), "/usr/lib/a:/opt/lib1:/opt/lib2");
  EXPECT_EQ(get(seen, "LD_PRELOAD"), kLibrary + ":/opt/hook.so");
}

TEST(AddPath, PrependsToEachVariable) {
  const auto seen = run_env({{"PATH", "/usr/bin"},
                             {"TF_PREPEND_PATH", "/first:/second"},
                             {"LD_LIBRARY_PATH", "/usr/lib/a"},
                             {"TF_PREPEND_LD_LIBRARY_PATH", "/opt/lib"},
                             {"TF_PREPEND_LD_PRELOAD", "/opt/early.so"}});
  EXPECT_EQ(get(seen, "PATH"), "/first:/second:/usr/bin");
  EXPECT_EQ(get(seen, "LD_LIBRARY_PATH"), "/opt/lib:/usr/lib/a");
  EXPECT_EQ(get(seen, "LD_PRELOAD"), "/opt/early.so:" + kLibrary);
}

TEST(AddPath, PrependsAndAppendsTogether) {
  const auto seen = run_env({{"PATH", "/usr/bin"}, {"TF_PREPEND_PATH", "/p"}, {"TF_PATH", "/a"}});
  EXPECT_EQ(get(seen, "PATH"), "/p:/usr/bin:/a");
}

TEST(AddPath, SkipsEntriesAlreadyPresent) {
  const auto seen = run_env({{"PATH", "/usr/bin:/bin"},
                             {"TF_PREPEND_PATH", "/usr/bin:/first:/first"},
                             {"TF_PATH", "/bin:/new:/first:/new"}});
  EXPECT_EQ(get(seen, "PATH"), "/first:/usr/bin:/bin:/new");
}

TEST(AddPath, ApplyingTwiceChangesNothing) {
  // What a child sees: it inherits the edited variables together with the TF_ ones.
  const auto seen = run_env({{"PATH", "/p:/usr/bin:/a"}, {"TF_PREPEND_PATH", "/p"}, {"TF_PATH", "/a"}});
  EXPECT_EQ(get(seen, "PATH"), "/p:/usr/bin:/a");
}

TEST(AddPath, LdPreloadEntriesSeparatedBySpacesCountAsPresent) {
  const auto seen = run_env({{"LD_PRELOAD", kLibrary + " /opt/hook.so"}, {"TF_LD_PRELOAD", "/opt/hook.so"}});
  EXPECT_EQ(get(seen, "LD_PRELOAD"), kLibrary + " /opt/hook.so");
}

TEST(AddPath, IgnoresEmptyEntries) {
  const auto seen = run_env({{"PATH", "/usr/bin"}, {"TF_PATH", "::/a::"}, {"TF_PREPEND_PATH", ":"}});
  EXPECT_EQ(get(seen, "PATH"), "/usr/bin:/a");
}

TEST(AddPath, KeepsEmptyEntriesOfTheCurrentValue) {
  // An empty PATH entry means the working directory; it is the user's to keep.
  const auto seen = run_env({{"PATH", "/usr/bin:"}, {"TF_PATH", "/a"}});
  EXPECT_EQ(get(seen, "PATH"), "/usr/bin::/a");
}

TEST(AddPath, EmptyOrUnsetTfVariablesChangeNothing) {
  const auto seen =
      run_env({{"PATH", "/usr/bin"}, {"TF_PATH", ""}, {"TF_PREPEND_PATH", ""}, {"TF_LD_LIBRARY_PATH", ""}});
  EXPECT_EQ(get(seen, "PATH"), "/usr/bin");
  EXPECT_EQ(get(seen, "LD_LIBRARY_PATH"), std::nullopt) << "an empty TF_ value must not create the variable";
  EXPECT_EQ(get(seen, "LD_PRELOAD"), kLibrary);
}

TEST(AddPath, UnsetTargetBecomesTheValue) {
  const auto seen = run_env({{"TF_LD_LIBRARY_PATH", "/a:/b:/a"}, {"TF_PREPEND_PATH", "/only"}});
  EXPECT_EQ(get(seen, "LD_LIBRARY_PATH"), "/a:/b");
  EXPECT_EQ(get(seen, "PATH"), "/only");
}

TEST(AddPath, EmptyTargetBecomesTheValue) {
  const auto seen = run_env({{"LD_LIBRARY_PATH", ""}, {"TF_LD_LIBRARY_PATH", "/a"}});
  EXPECT_EQ(get(seen, "LD_LIBRARY_PATH"), "/a");
}

}  // namespace
