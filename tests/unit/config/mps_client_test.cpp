// The MPS client's variables derived from the container's limits (config/mps_client.h), the GPUs
// the client numbers before the driver starts, and the server it would join.
#include "config/mps_client.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "temp_dir.h"

namespace gpuslice::config {
namespace {

constexpr std::uint64_t kMiB = 1ULL << 20;

TEST(MpsClientEnv, ThePinnedLimitIsTheQuotaPerOrdinalInMebibytes) {
  MpsClientInputs in;
  in.quota_by_ordinal = {{1, 4096 * kMiB}, {0, 8192 * kMiB + 123}};
  const MpsClientEnv env = derive_mps_client_env(in);
  ASSERT_TRUE(env.pinned);
  EXPECT_EQ(*env.pinned, "0=8192M,1=4096M");
  EXPECT_FALSE(env.tenant_lowered);
}

TEST(MpsClientEnv, ATenantsLargerLimitIsLoweredItsSmallerOneKeptAndItsOthersLeft) {
  MpsClientInputs in;
  in.quota_by_ordinal = {{0, 1024 * kMiB}, {1, 512 * kMiB}};
  in.tenant_pinned = "0=4G, 1=256mb ,2=1G";
  const MpsClientEnv env = derive_mps_client_env(in);
  ASSERT_TRUE(env.pinned);
  EXPECT_EQ(*env.pinned, "0=1024M,1=256M,2=1024M");
  EXPECT_TRUE(env.tenant_lowered);
}

TEST(MpsClientEnv, AMalformedTenantLimitIsReplacedAndWithoutAQuotaTheTenantsStands) {
  MpsClientInputs in;
  in.quota_by_ordinal = {{0, 2048 * kMiB}};
  in.tenant_pinned = "0=lots";
  MpsClientEnv env = derive_mps_client_env(in);
  EXPECT_EQ(env.pinned.value_or(""), "0=2048M");
  EXPECT_TRUE(env.tenant_lowered);
  in.quota_by_ordinal.clear();
  in.tenant_pinned = "0=4G";
  env = derive_mps_client_env(in);
  EXPECT_FALSE(env.pinned) << "nothing to lower: left as the tenant set it";
}

TEST(MpsClientEnv, OnlyHighKeepsTheNormalClientPriorityAndATenantCannotRaiseIt) {
  MpsClientInputs in;
  EXPECT_EQ(derive_mps_client_env(in).priority, "1");
  in.tenant_priority = "0";
  MpsClientEnv env = derive_mps_client_env(in);
  EXPECT_EQ(env.priority, "1");
  EXPECT_TRUE(env.tenant_lowered);
  in.high = true;
  in.tenant_priority.reset();
  EXPECT_EQ(derive_mps_client_env(in).priority, "0");
  in.tenant_priority = "1";  // a high tenant may lower itself
  EXPECT_EQ(derive_mps_client_env(in).priority, "1");
}

TEST(MpsClientEnv, TheOperatorsThreadShareAppliesBelowHighOnlyAndTheTenantMayTakeLess) {
  MpsClientInputs in;
  EXPECT_FALSE(derive_mps_client_env(in).threads) << "off by default";
  in.low_threads = 50;
  EXPECT_EQ(derive_mps_client_env(in).threads.value_or(""), "50");
  in.tenant_threads = "100";
  EXPECT_EQ(derive_mps_client_env(in).threads.value_or(""), "50");
  in.tenant_threads = "20";
  EXPECT_EQ(derive_mps_client_env(in).threads.value_or(""), "20");
  in.high = true;
  EXPECT_FALSE(derive_mps_client_env(in).threads);
}

// GPUSLICE_MPS_COMPUTE=threads: the compute limit becomes the client's SM share.
MpsClientInputs threads_mode(std::vector<unsigned> limits) {
  MpsClientInputs in;
  in.compute_mode = MpsComputeMode::Threads;
  in.compute_by_ordinal = std::move(limits);
  return in;
}

TEST(MpsComputeThreads, TheComputeLimitIsTheActiveThreadPercentageAndTheSmShare) {
  MpsClientInputs in = threads_mode({30});
  MpsClientEnv env = derive_mps_client_env(in);
  EXPECT_EQ(env.threads.value_or(""), "30");
  EXPECT_EQ(env.sm_share, 30U);
  EXPECT_NE(env.compute_note.find("as an SM share"), std::string::npos) << env.compute_note;
  in.high = true;  // a limit, not a priority: it holds at every level
  env = derive_mps_client_env(in);
  EXPECT_EQ(env.threads.value_or(""), "30");
  EXPECT_EQ(env.sm_share, 30U);
}

TEST(MpsComputeThreads, ATenantsValueIsLoweredToTheLimitNeverRaised) {
  MpsClientInputs in = threads_mode({30, 30});
  for (const char* higher : {"100", "31", "0", "junk", ""}) {
    in.tenant_threads = higher;
    const MpsClientEnv env = derive_mps_client_env(in);
    EXPECT_EQ(env.threads.value_or(""), "30") << higher;
    EXPECT_EQ(env.sm_share, 30U) << higher;
    EXPECT_TRUE(env.tenant_lowered) << higher;
  }
  in.tenant_threads = "20";  // a tenant may take fewer SMs: its share is then 20
  MpsClientEnv env = derive_mps_client_env(in);
  EXPECT_EQ(env.threads.value_or(""), "20");
  EXPECT_EQ(env.sm_share, 20U);
  EXPECT_FALSE(env.tenant_lowered);
  in.tenant_threads = "30";
  EXPECT_FALSE(derive_mps_client_env(in).tenant_lowered);
}

TEST(MpsComputeThreads, CombinesWithTheLowThreadsShareByTakingTheLower) {
  MpsClientInputs in = threads_mode({30});
  in.low_threads = 40;
  EXPECT_EQ(derive_mps_client_env(in).threads.value_or(""), "30");
  in.low_threads = 20;
  MpsClientEnv env = derive_mps_client_env(in);
  EXPECT_EQ(env.threads.value_or(""), "20");
  EXPECT_EQ(env.sm_share, 20U) << "the SMs it has are what holds its limit";
  in.high = true;  // the low share is not a high container's
  env = derive_mps_client_env(in);
  EXPECT_EQ(env.threads.value_or(""), "30");
  EXPECT_EQ(env.sm_share, 30U);
}

TEST(MpsComputeThreads, TheDefaultTimeModeLeavesTheThreadsToTheLowShareAndSaysSo) {
  MpsClientInputs in = threads_mode({30});
  in.compute_mode = MpsComputeMode::Time;
  MpsClientEnv env = derive_mps_client_env(in);
  EXPECT_FALSE(env.threads);
  EXPECT_EQ(env.sm_share, 0U);
  EXPECT_NE(env.compute_note.find("by GPU time (GPUSLICE_MPS_COMPUTE=time)"), std::string::npos)
      << env.compute_note;
  in.low_threads = 50;
  env = derive_mps_client_env(in);
  EXPECT_EQ(env.threads.value_or(""), "50") << "the low share is unchanged";
  EXPECT_EQ(env.sm_share, 0U);
}

TEST(MpsComputeThreads, GpusWithDifferentLimitsOrUnknownGpusAreHeldByGpuTime) {
  for (const std::vector<unsigned>& limits :
       {std::vector<unsigned>{30, 50}, std::vector<unsigned>{30, 0}, std::vector<unsigned>{0, 30, 30}}) {
    const MpsClientEnv env = derive_mps_client_env(threads_mode(limits));
    EXPECT_FALSE(env.threads) << "the variable would hold a GPU of another limit alike";
    EXPECT_EQ(env.sm_share, 0U);
    EXPECT_NE(env.compute_note.find("different compute limits"), std::string::npos) << env.compute_note;
  }
  MpsClientInputs unknown;
  unknown.compute_mode = MpsComputeMode::Threads;
  MpsClientEnv env = derive_mps_client_env(unknown);
  EXPECT_EQ(env.sm_share, 0U);
  EXPECT_NE(env.compute_note.find("not known"), std::string::npos) << env.compute_note;
  // No compute limit (none, or 100%): nothing to hold, nothing said.
  for (const std::vector<unsigned>& none : {std::vector<unsigned>{0, 0}, std::vector<unsigned>{100}}) {
    env = derive_mps_client_env(threads_mode(none));
    EXPECT_FALSE(env.threads);
    EXPECT_EQ(env.sm_share, 0U);
    EXPECT_TRUE(env.compute_note.empty()) << env.compute_note;
  }
}

// A limit lowered while the process runs: the SMs it started with hold it no more, so the GPU-time
// limiter gives it the share of its time that leaves it the new limit of the device; a raise is left
// to the SM share (processes started later take the new one).
TEST(MpsComputeThreads, ALiveLimitBelowTheShareIsHeldByTheTimeThatLeavesItThatMuch) {
  EXPECT_EQ(partition_time_limit(50, 50), 0U);
  EXPECT_EQ(partition_time_limit(80, 50), 0U) << "a raise: the SM share stays";
  EXPECT_EQ(partition_time_limit(0, 50), 0U) << "no limit any more: the SM share stays";
  EXPECT_EQ(partition_time_limit(100, 50), 0U);
  EXPECT_EQ(partition_time_limit(30, 50), 60U);
  EXPECT_EQ(partition_time_limit(20, 80), 25U);
  EXPECT_EQ(partition_time_limit(1, 99), 1U);
  EXPECT_EQ(partition_time_limit(98, 99), 99U);
  EXPECT_EQ(partition_time_limit(30, 0), 30U) << "no SM share: the limit itself";
}

TEST(MpsComputeMode, NamesBothWays) {
  EXPECT_EQ(parse_mps_compute_mode("threads"), MpsComputeMode::Threads);
  EXPECT_EQ(parse_mps_compute_mode("Time"), MpsComputeMode::Time);
  for (const char* bad : {"", "sm", "threads ", "thread", "none"})
    EXPECT_FALSE(parse_mps_compute_mode(bad)) << bad;
  EXPECT_STREQ(mps_compute_mode_name(MpsComputeMode::Threads), "threads");
  EXPECT_STREQ(mps_compute_mode_name(MpsComputeMode::Time), "time");
}

TEST(MpsPinnedLimit, ParsesUnitsAndRefusesJunk) {
  const auto ok = parse_mps_pinned_limit("0=1G,1=512M,2=64K,3=100");
  ASSERT_TRUE(ok);
  ASSERT_EQ(ok->size(), 4U);
  EXPECT_EQ((*ok)[0].second, 1024 * kMiB);
  EXPECT_EQ((*ok)[1].second, 512 * kMiB);
  EXPECT_EQ((*ok)[2].second, 64 * 1024U);
  EXPECT_EQ((*ok)[3].second, 100U);
  for (const char* bad :
       {"", "1G", "=1G", "0=", "0=1T", "x=1G", "0=-1G", "0=99999999999999999999G", "2000=1G"})
    EXPECT_FALSE(parse_mps_pinned_limit(bad)) << bad;
}

class TempTree : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(root_.empty()) << "mkdtemp failed"; }
  void file(const std::string& rel, const std::string& text) {
    const std::string path = root_ + "/" + rel;
    std::system(("mkdir -p \"$(dirname '" + path + "')\"").c_str());
    std::ofstream(path) << text;
  }
  gpuslice::test::TempDir temp_{"gpuslice-mps-unit"};  // removed with all it holds at the end
  const std::string root_ = temp_.path();
};

using MachineGpus = TempTree;

TEST_F(MachineGpus, AreListedInPciOrderAndNumberedThroughCudaVisibleDevices) {
  file("gpus/0000:9a:00.0/information", "Model: H200\nGPU UUID: GPU-BBBB-2\nBus Location: 0000:9a:00.0\n");
  file("gpus/0000:18:00.0/information", "Model: H200\nGPU UUID: GPU-aaaa-1\n");
  const auto machine = machine_gpu_uuids(root_ + "/gpus");
  ASSERT_EQ(machine.size(), 2U);
  EXPECT_EQ(machine[0], "gpu-aaaa-1");
  EXPECT_EQ(machine[1], "gpu-bbbb-2");
  EXPECT_EQ(client_ordinal_uuids(std::nullopt, machine), machine);
  const auto swapped = client_ordinal_uuids(std::string("1,0"), machine);
  ASSERT_EQ(swapped.size(), 2U);
  EXPECT_EQ(swapped[0], "gpu-bbbb-2");
  const auto by_uuid = client_ordinal_uuids(std::string("GPU-BBBB"), machine);
  ASSERT_EQ(by_uuid.size(), 1U);
  EXPECT_EQ(by_uuid[0], "gpu-bbbb-2") << "a UUID prefix names the GPU";
  EXPECT_EQ(client_ordinal_uuids(std::string("1,7,0"), machine).size(), 1U)
      << "CUDA stops at an invalid index";
  EXPECT_TRUE(machine_gpu_uuids(root_ + "/none").empty());
}

using MpsServer = TempTree;

TEST_F(MpsServer, OfAnotherUserIsFoundAmongTheControlDaemonsChildren) {
  // A fake /proc: the daemon 40 (its pid file in the pipe directory), servers 41 (ours) and 42.
  file("pipe/nvidia-cuda-mps-control.pid", "40\n");
  file("proc/40/comm", "nvidia-cuda-mps\n");
  file("proc/40/task/40/children", "41 42 ");
  file("proc/41/comm", "nvidia-cuda-mps\n");
  file("proc/42/comm", "nvidia-cuda-mps\n");
  const uid_t self = geteuid();
  struct stat st {};
  ASSERT_EQ(stat((root_ + "/proc/42").c_str(), &st), 0);
  // Every fake process is ours: none of another user.
  EXPECT_FALSE(other_uid_mps_server(root_ + "/proc", root_ + "/pipe", self));
  // Seen by a client of another user id, the servers are someone else's.
  const auto other = other_uid_mps_server(root_ + "/proc", root_ + "/pipe", self + 1);
  ASSERT_TRUE(other);
  EXPECT_EQ(*other, st.st_uid);
  // A pid that is not an MPS process here (another pid namespace) says nothing.
  file("proc/40/comm", "bash\n");
  EXPECT_FALSE(other_uid_mps_server(root_ + "/proc", root_ + "/pipe", self + 1));
  EXPECT_FALSE(other_uid_mps_server(root_ + "/proc", root_ + "/missing", self + 1));
}

}  // namespace
}  // namespace gpuslice::config
