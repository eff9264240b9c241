// The host memory a borrowing process may still pin (interposer/reclaim/host_room.h): the readings
// of /proc and the cgroup files, and the decision they feed.
#include "interposer/reclaim/host_room.h"

#include <gtest/gtest.h>

#include "common/safe_file.h"

namespace gpuslice::interposer::reclaim {
namespace {

constexpr std::uint64_t kHostMiB = 1ULL << 20;

TEST(HostRoom, MemAvailableIsReadInBytesFromItsLineOnly) {
  const char* meminfo =
      "MemTotal:       24576000 kB\n"
      "MemFree:         1000000 kB\n"
      "MemAvailable:   16777216 kB\n"
      "Buffers:          123456 kB\n";
  EXPECT_EQ(mem_available(meminfo), 16777216ULL << 10);
  EXPECT_EQ(mem_available("MemTotal: 1 kB\n"), std::nullopt);
  EXPECT_EQ(mem_available("MemAvailable: lots kB\n"), std::nullopt);
  EXPECT_EQ(mem_available("MemAvailable: 12 MB\n"), std::nullopt);
  EXPECT_EQ(mem_available("MemAvailable: 99999999999999999999999 kB\n"), std::nullopt);
}

TEST(HostRoom, TheCgroupPathIsTheV2LineAndNeverClimbsOut) {
  EXPECT_EQ(cgroup_v2_path("0::/kubepods.slice/pod1/cri-abc\n"), "/kubepods.slice/pod1/cri-abc");
  EXPECT_EQ(cgroup_v2_path("12:memory:/docker/x\n0::/\n"), "/");
  EXPECT_EQ(cgroup_v2_path("12:memory:/docker/x\n"), std::nullopt);  // v1 only: no v2 limits to read
  EXPECT_EQ(cgroup_v2_path("0::/a/../../etc\n"), std::nullopt);
  EXPECT_EQ(cgroup_v2_path("0::relative\n"), std::nullopt);
}

TEST(HostRoom, TheV1MemoryControllersPathIsTheLineNamingIt) {
  const char* hybrid = "5:devices:/\n4:memory:/process_api/abc\n3:cpu,cpuacct:/x\n0::/\n";
  EXPECT_EQ(cgroup_v1_memory_path(hybrid), "/process_api/abc");
  EXPECT_EQ(cgroup_v1_memory_path("7:cpu,memory:/docker/1\n"), "/docker/1");
  EXPECT_EQ(cgroup_v1_memory_path("7:memoryx:/no\n0::/\n"), std::nullopt);
  EXPECT_EQ(cgroup_v1_memory_path("4:memory:/a/../..\n"), std::nullopt);
  EXPECT_EQ(cgroup_v2_path(hybrid), "/");
}

TEST(HostRoom, ACgroupValueIsBytesOrNoLimit) {
  EXPECT_EQ(cgroup_bytes("8589934592\n"), 8589934592ULL);
  EXPECT_EQ(cgroup_bytes("max\n"), std::nullopt);
  EXPECT_EQ(cgroup_bytes("12abc"), std::nullopt);
  EXPECT_EQ(cgroup_bytes(""), std::nullopt);
}

TEST(HostRoom, ABorrowFitsOnlyWithItsPinnedCopyAndTheMargin) {
  EXPECT_TRUE(host_room_allows(1024 * kHostMiB, 2048 * kHostMiB));
  EXPECT_TRUE(host_room_allows(1536 * kHostMiB, 2048 * kHostMiB));
  EXPECT_FALSE(host_room_allows(1537 * kHostMiB, 2048 * kHostMiB));
  EXPECT_FALSE(host_room_allows(1, kHostMarginBytes));
  EXPECT_TRUE(host_room_allows(1ULL << 40, std::nullopt)) << "nothing known to refuse by";
}

// The process's own cgroup file is read through the project's safe reads (which refuse the
// /proc/self link: read there, no cgroup limit was ever applied) and names its cgroup.
TEST(HostRoom, TheProcesssOwnCgroupFileIsReadAndNamesItsCgroup) {
  auto text = fs::read_small_file(own_cgroup_file(), 64 << 10);
  ASSERT_TRUE(text) << own_cgroup_file() << ": " << text.error();
  EXPECT_TRUE(cgroup_v2_path(text.value()) || cgroup_v1_memory_path(text.value())) << text.value();
}

// On this machine: whatever it reads is at most what /proc/meminfo says is available.
TEST(HostRoom, TheRoomReadHereIsAtMostTheAvailableMemory) {
  const std::optional<std::uint64_t> room = host_room_bytes();
  ASSERT_TRUE(room.has_value()) << "/proc/meminfo is readable on Linux";
  EXPECT_GT(*room, 0u);
}

}  // namespace
}  // namespace gpuslice::interposer::reclaim
