// Stale node-channel writer directories go with their allocation (node/channel_gc.h).
#include "node/channel/channel_gc.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/clock.h"
#include "temp_dir.h"

namespace gpuslice::node {
namespace {

constexpr std::uint64_t kMinute = 60'000'000'000ULL;

class ChannelGc : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.empty()) << "mkdtemp failed"; }

  // A writer directory as the device plugin makes it, with one record, last written `age` ago.
  void writer(const std::string& id, std::uint64_t age_ns, bool assigned = true) {
    const std::string path = dir_ + "/" + id;
    ASSERT_EQ(mkdir(path.c_str(), 01777), 0);
    std::ofstream(path + "/GPU-1.0000000000000001") << "record";
    if (assigned) std::ofstream(path + ".assigned") << "priority=normal\n";
    const std::uint64_t then = realtime_ns() - age_ns;
    const timespec times[2] = {
        {static_cast<time_t>(then / 1'000'000'000ULL), static_cast<long>(then % 1'000'000'000ULL)},
        {static_cast<time_t>(then / 1'000'000'000ULL), static_cast<long>(then % 1'000'000'000ULL)}};
    ASSERT_EQ(utimensat(AT_FDCWD, (path + "/GPU-1.0000000000000001").c_str(), times, 0), 0);
    ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  }
  bool exists(const std::string& name) const { return std::filesystem::exists(dir_ + "/" + name); }

  gpuslice::test::TempDir temp_{"gpuslice-channel-gc"};  // removed with all it holds at the end
  const std::string dir_ = temp_.path();
};

// What was found (2): every cores allocation left a writer directory that nothing removed.
TEST_F(ChannelGc, AWriterDirectoryUnchangedForTheGracePeriodGoesWithItsAssignment) {
  if (geteuid() != 0) GTEST_SKIP() << "the device plugin's directories are root's";
  writer("gone", 30 * kMinute);
  writer("live", 0);
  writer("not-ours", 30 * kMinute, /*assigned=*/false);
  EXPECT_EQ(remove_stale_writers(dir_, 10 * kMinute, realtime_ns()), 1u);
  EXPECT_FALSE(exists("gone"));
  EXPECT_FALSE(exists("gone.assigned"));
  EXPECT_TRUE(exists("live")) << "its container still writes its record";
  EXPECT_TRUE(exists("live.assigned"));
  EXPECT_TRUE(exists("not-ours")) << "no assignment: not the device plugin's";
  EXPECT_EQ(remove_stale_writers(dir_, 0, realtime_ns() + 60 * kMinute), 0u)
      << "a grace of 0 removes nothing";
  EXPECT_TRUE(exists("live"));
}

}  // namespace
}  // namespace gpuslice::node
