// Attacks on a shared or pre-created profile directory, each a regression test named after it:
// nobody who can write the directory can redirect the profiler's writes, block it, or delay a
// profiled process's exit without bound.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "profiler/profiler.h"
#include "test_support.h"

namespace gpuslice::profiler {
namespace {

using test::TempDir;

const char* const kIsolationNames[] = {"cuInit", "cuMemAlloc"};

Options quiet() {
  Options options;
  options.background_flusher = false;
  options.handle_termination_signals = false;
  return options;
}

class ProfileDirAttack : public ::testing::Test {
 protected:
  void TearDown() override { stop(); }
  std::string path(const std::string& name) const { return (dir_.path() / name).string(); }
  // A file the attacker wants overwritten (stands for /etc/passwd).
  std::string plant_victim() {
    std::string victim = (victim_dir_.path() / "passwd").string();
    std::ofstream(victim) << "root:x:0:0\n";
    return victim;
  }

  TempDir dir_;
  TempDir victim_dir_;
};

TEST_F(ProfileDirAttack, ProfilerDoesNotWriteThroughASymlinkedMetricsTmp) {
  std::string victim = plant_victim();
  ASSERT_EQ(symlink(victim.c_str(), path(".metrics.log.tmp").c_str()), 0);
  ASSERT_TRUE(start(dir_.path().c_str(), kIsolationNames, 2, quiet()));
  record(1, 10, 20);
  flush();
  stop();
  EXPECT_EQ(test::read_file(victim), "root:x:0:0\n");
}

TEST_F(ProfileDirAttack, ProfilerDoesNotAppendThroughASymlinkedTimeline) {
  std::string victim = plant_victim();
  ASSERT_EQ(symlink(victim.c_str(), path("timeline.log").c_str()), 0);
  EXPECT_FALSE(start(dir_.path().c_str(), kIsolationNames, 2, quiet()));
  record(1, 10, 20);
  stop();
  EXPECT_EQ(test::read_file(victim), "root:x:0:0\n");
}

TEST_F(ProfileDirAttack, ProfilerDoesNotCreateFilesThroughASymlinkedMetricsLock) {
  std::string target = (victim_dir_.path() / "created-by-the-profiler").string();
  ASSERT_EQ(symlink(target.c_str(), path(".metrics.lock").c_str()), 0);
  ASSERT_TRUE(start(dir_.path().c_str(), kIsolationNames, 2, quiet()));
  record(1, 10, 20);
  flush();
  stop();
  EXPECT_FALSE(std::filesystem::exists(target));
  // Its own file is still written; only the merge is skipped.
  EXPECT_TRUE(std::filesystem::exists(path("metrics." + std::to_string(getpid()) + ".log")));
}

TEST_F(ProfileDirAttack, AFifoPlantedAsAMetricsFileDoesNotBlockTheMerge) {
  // Named after pid 1, which the profiled child can never have (a fixed pid such as 4242 can be the
  // child's own on a fresh machine, and then its own metrics file is the FIFO).
  ASSERT_EQ(mkfifo(path("metrics.1.log").c_str(), 0666), 0);
  const std::string dir = dir_.path().string();
  pid_t child = test::run_in_child([dir] {
    if (!start(dir.c_str(), kIsolationNames, 2, quiet())) _exit(2);
    record(1, 10, 20);
    flush();
    stop();
    _exit(0);
  });
  ASSERT_EQ(test::wait_for_status(child, 10), 0) << "the merge blocked on the FIFO";
  EXPECT_EQ(test::read_file(path("metrics.log")), "name:cuMemAlloc\ncount:1\nburst:20\n");
}

TEST_F(ProfileDirAttack, AStoppedHolderOfTheMetricsLockDelaysExitOnlyBoundedly) {
  // Another process takes .metrics.lock and is stopped (SIGSTOP, a debugger) while holding it.
  const std::string lock_path = path(".metrics.lock");
  pid_t holder = test::run_in_child([lock_path] {
    int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT, 0644);
    if (fd < 0 || flock(fd, LOCK_EX) != 0) _exit(2);
    raise(SIGSTOP);
    _exit(0);
  });
  int status = 0;
  ASSERT_EQ(waitpid(holder, &status, WUNTRACED), holder);
  ASSERT_TRUE(WIFSTOPPED(status));
  const std::string dir = dir_.path().string();
  auto begin = std::chrono::steady_clock::now();
  pid_t profiled = test::run_in_child([dir] {
    if (!start(dir.c_str(), kIsolationNames, 2, quiet())) _exit(2);
    record(1, 10, 20);
    std::exit(0);  // the exit flush must not wait for the stopped holder
  });
  int profiled_status = test::wait_for_status(profiled, 10);
  auto waited = std::chrono::steady_clock::now() - begin;
  kill(holder, SIGKILL);
  waitpid(holder, &status, 0);
  ASSERT_TRUE(WIFEXITED(profiled_status)) << "the profiled process hung on the lock";
  EXPECT_EQ(WEXITSTATUS(profiled_status), 0);
  EXPECT_LT(waited, std::chrono::seconds(5));
}

TEST_F(ProfileDirAttack, WorldWritableProfileDirectoryWithoutStickyBitIsRefused) {
  ASSERT_EQ(chmod(dir_.path().c_str(), 0777), 0);
  EXPECT_FALSE(start(dir_.path().c_str(), kIsolationNames, 2, quiet()));
  ASSERT_EQ(chmod(dir_.path().c_str(), 01777), 0);
  EXPECT_TRUE(start(dir_.path().c_str(), kIsolationNames, 2, quiet()));
}

TEST_F(ProfileDirAttack, ProfileDirectoryOwnedByAnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a directory away";
  ASSERT_EQ(chown(dir_.path().c_str(), 65534, 65534), 0);
  EXPECT_FALSE(start(dir_.path().c_str(), kIsolationNames, 2, quiet()));
  EXPECT_FALSE(std::filesystem::exists(path("timeline.log")));
}

TEST_F(ProfileDirAttack, SymlinkedProfileDirectoryIsRefused) {
  const std::string link = (victim_dir_.path() / "link").string();
  ASSERT_EQ(symlink(dir_.path().c_str(), link.c_str()), 0);
  EXPECT_FALSE(start(link.c_str(), kIsolationNames, 2, quiet()));
}

}  // namespace
}  // namespace gpuslice::profiler
