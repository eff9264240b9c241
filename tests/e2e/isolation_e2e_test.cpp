// End to end: attacks of one tenant on another through gpuslice's files, with the real
// libgpuslice.so and CLI on the simulated driver. Each attack is a test named after it.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "process.h"

namespace gpuslice::test {
namespace {

constexpr char kGpu0[] = "GPU-6d6f636b-0000-4000-8000-000000000000";

class IsolationE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir("gpuslice-iso-e2e-");
    ASSERT_FALSE(dir_.empty());
    // Lets the second uid of some tests reach the files.
    ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
  }
  void TearDown() override { remove_tree(dir_); }

  // A process of one "container": its own shared dir, the node dir every container shares.
  Env container_env(const std::string& name) const {
    Env env;
    env["PATH"] = "/usr/bin:/bin";
    env["LD_LIBRARY_PATH"] = GPUSLICE_MOCK_DIR;
    env["LD_PRELOAD"] = GPUSLICE_PRELOAD;
    env["GPUSLICE_SHARED_DIR"] = dir_ + "/" + name + "/shared";
    env["GPUSLICE_NODE_DIR"] = dir_ + "/node";
    env["GPUSLICE_MOCK_STATE_DIR"] = dir_ + "/mock";
    env["GPUSLICE_MOCK_DEVICES"] = "1";
    env["GPUSLICE_COMPUTE_LIMIT"] = "40";
    env["ASAN_OPTIONS"] = "verify_asan_link_order=0:detect_leaks=0";
    return env;
  }
  // Long enough (about 1 s under the limit) for the watcher to publish on the node channel.
  Outcome launch(const Env& env) const {
    return run({GPUSLICE_PROBE_APP, "--scenario", "launch", "--iterations", "400", "--kernel-us", "1000"},
               env);
  }

  std::string dir_;
};

TEST_F(IsolationE2E, ComputeLimitedContainersPublishOnlyInTheirOwnWriterDirectories) {
  Env a = container_env("a");
  a["GPUSLICE_NODE_WRITER"] = "ctr-a";
  Env b = container_env("b");
  b["GPUSLICE_NODE_WRITER"] = "ctr-b";
  Outcome ran_a = launch(a);
  ASSERT_EQ(ran_a.exit_code, 0) << ran_a.err;
  Outcome ran_b = launch(b);
  ASSERT_EQ(ran_b.exit_code, 0) << ran_b.err;
  for (const char* writer : {"ctr-a", "ctr-b"}) {
    int records = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir_ + "/node/" + writer)) {
      EXPECT_EQ(entry.path().filename().string().rfind(std::string(kGpu0) + ".", 0), 0U) << entry.path();
      EXPECT_EQ(std::filesystem::file_size(entry.path()), 88U);
      ++records;
    }
    EXPECT_EQ(records, 1) << writer;
  }
}

TEST_F(IsolationE2E, TurnFileSymlinkToARootOnlyFileIsRefusedAndLeftUntouched) {
  // A neighbour plants the turn table's old name and our writer directory as links to root's files.
  std::string secret_dir = dir_ + "/root-only";
  ASSERT_EQ(mkdir(secret_dir.c_str(), 0700), 0);
  std::string secret = secret_dir + "/secret";
  std::ofstream(secret) << "root only";
  ASSERT_EQ(chmod(secret.c_str(), 0600), 0);
  ASSERT_EQ(mkdir((dir_ + "/node").c_str(), 01777), 0);
  ASSERT_EQ(symlink(secret.c_str(), (dir_ + "/node/turns-" + kGpu0).c_str()), 0);
  ASSERT_EQ(symlink(secret_dir.c_str(), (dir_ + "/node/uid-" + std::to_string(geteuid())).c_str()), 0);
  Outcome ran = launch(container_env("a"));
  ASSERT_EQ(ran.exit_code, 0) << ran.err;
  struct stat st {};
  ASSERT_EQ(stat(secret.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600U);
  EXPECT_EQ(st.st_size, 9);
  int entries = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(secret_dir)) ++entries;
  EXPECT_EQ(entries, 1) << "nothing may be created through the planted link";
}

// A node directory anyone can write without the sticky bit is refused (row 20), and the process
// then shares nothing with the other containers: that was only a log line inside the container. It
// is in the state file now, so `gpuslice status` (and the daemon's metric) say so.
TEST_F(IsolationE2E, ARefusedNodeChannelIsShownByStatus) {
  ASSERT_EQ(mkdir((dir_ + "/node").c_str(), 0777), 0);
  ASSERT_EQ(chmod((dir_ + "/node").c_str(), 0777), 0);  // whatever the umask: writable by all, no sticky bit
  Outcome ran = launch(container_env("a"));
  ASSERT_EQ(ran.exit_code, 0) << ran.err;
  EXPECT_NE(ran.err.find("node channel refused"), std::string::npos) << ran.err;
  Env cli;
  cli["PATH"] = "/usr/bin:/bin";
  Outcome status = run({GPUSLICE_CLI, "status", "--shared-dir", dir_ + "/a/shared"}, cli);
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_NE(status.out.find("Node channel: REFUSED"), std::string::npos) << status.out;
  Outcome json = run({GPUSLICE_CLI, "status", "--json", "--shared-dir", dir_ + "/a/shared"}, cli);
  EXPECT_NE(json.out.find("\"node_channel_refused\":true"), std::string::npos) << json.out;

  // A trustworthy node directory: nothing to say.
  ASSERT_EQ(chmod((dir_ + "/node").c_str(), 01777), 0);
  Outcome fine = launch(container_env("b"));
  ASSERT_EQ(fine.exit_code, 0) << fine.err;
  Outcome quiet = run({GPUSLICE_CLI, "status", "--shared-dir", dir_ + "/b/shared"}, cli);
  EXPECT_EQ(quiet.out.find("Node channel"), std::string::npos) << quiet.out;
}

TEST_F(IsolationE2E, StatusDoesNotHangOnAFifoStateFile) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run the CLI as a second uid";
  std::string shared = dir_ + "/a/shared";
  std::filesystem::create_directories(shared);
  ASSERT_EQ(chmod((dir_ + "/a").c_str(), 0755), 0);
  ASSERT_EQ(chmod(shared.c_str(), 0755), 0);
  ASSERT_EQ(mkfifo((shared + "/state").c_str(), 0644), 0);
  Env env;
  env["PATH"] = "/usr/bin:/bin";
  Outcome status = run({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", GPUSLICE_CLI,
                        "status", "--shared-dir", shared},
                       env, /*timeout_s=*/10);
  EXPECT_EQ(status.exit_code, 1) << "killed after the timeout means it hung\n" << status.err;
  EXPECT_NE(status.err.find("FIFO"), std::string::npos) << status.err;
}

TEST_F(IsolationE2E, StatusReportsATruncatedStateFileInsteadOfCrashing) {
  Env env = container_env("a");
  env.erase("GPUSLICE_COMPUTE_LIMIT");
  env["GPUSLICE_MEMORY_LIMIT"] = "1Gi";
  Outcome ran = run({GPUSLICE_PROBE_APP, "--scenario", "fill"}, env);
  ASSERT_EQ(ran.exit_code, 0) << ran.err;
  std::string state = dir_ + "/a/shared/state";
  ASSERT_TRUE(std::filesystem::exists(state));
  ASSERT_EQ(truncate(state.c_str(), 4096), 0);
  Env cli;
  cli["PATH"] = "/usr/bin:/bin";
  Outcome status = run({GPUSLICE_CLI, "status", "--shared-dir", dir_ + "/a/shared"}, cli, 10);
  EXPECT_EQ(status.exit_code, 1) << status.out << status.err;
  EXPECT_NE(status.err.find("truncated"), std::string::npos) << status.err;
}

}  // namespace
}  // namespace gpuslice::test
