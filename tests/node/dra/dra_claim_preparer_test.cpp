#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include "../test_util.h"
#include "common/safe_file.h"
#include "config/limits_file.h"
#include "dra_test_util.h"
#include "node/collector.h"
#include "node/dra/cdi_spec.h"
#include "node/dra/claim_attribution.h"
#include "node/dra/claim_preparer.h"
#include "node/metrics.h"
#include "shared_state/node_channel.h"

namespace gpuslice::node::dra {
namespace {

using test::allocated_claim;
using test::slice_config;

class DraPrepare : public ::testing::Test, protected test::PreparerFixture {
 protected:
  std::string container(const std::string& uid) { return tmp / ("root/containers/dra-" + uid); }
  std::string spec(const std::string& uid) { return tmp / ("cdi/" + cdi_spec_file_name(uid)); }
  bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }
};

TEST_F(DraPrepare, WritesTheScheduledLimitsReadOnlyAndACdiSpec) {
  std::filesystem::create_directories(tmp / "dev");
  node::test::write_file(tmp / "dev/nvidia0", "");
  node::test::write_file(tmp / "dev/nvidiactl", "");
  claims.claims["team-a/train-gpu"] = allocated_claim("uid-1", {{}}, slice_config({{"priority", "high"}}));
  auto o = preparer_options();
  o.priority_high_namespaces = {"team-a"};
  ClaimPreparer p(o, claims);
  ASSERT_TRUE(p.recover());
  auto devices = p.prepare({"team-a", "train-gpu", "uid-1"});
  ASSERT_TRUE(devices) << devices.error();
  ASSERT_EQ(devices->size(), 1u);
  EXPECT_EQ((*devices)[0].pool, "node-a");
  EXPECT_EQ((*devices)[0].device, "gpu-0");
  EXPECT_EQ((*devices)[0].cdi_ids, std::vector<std::string>{"gpuslice.io/claim=uid-1"});

  const std::string limits = container("uid-1") + "/config/limits";
  auto file = config::read_limits_file(limits);
  ASSERT_TRUE(file) << file.error();
  EXPECT_EQ(file->memory->text, std::to_string(8ULL << 30));
  EXPECT_EQ(file->compute->text, "30");
  EXPECT_EQ(file->priority, Priority::High);
  struct stat st {};
  ASSERT_EQ(::stat(limits.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0444u) << "the container must not be able to raise its caps";
  ASSERT_EQ(::stat((container("uid-1") + "/state").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 01777u);

  auto cdi = nlohmann::json::parse(node::test::read_file(spec("uid-1")));
  EXPECT_EQ(cdi["kind"], "gpuslice.io/claim");
  EXPECT_EQ(cdi["devices"][0]["name"], "uid-1");
  const auto& edits = cdi["devices"][0]["containerEdits"];
  auto env = edits["env"].get<std::vector<std::string>>();
  auto has = [&](const std::string& e) { return std::find(env.begin(), env.end(), e) != env.end(); };
  EXPECT_TRUE(has("GPUSLICE_MEMORY_LIMIT=" + std::to_string(8ULL << 30)));
  EXPECT_TRUE(has("GPUSLICE_COMPUTE_LIMIT=30"));
  EXPECT_TRUE(has("GPUSLICE_PRIORITY=high"));
  EXPECT_TRUE(has("LD_PRELOAD=/usr/local/lib/gpuslice/libgpuslice.so"));
  EXPECT_TRUE(has("NVIDIA_VISIBLE_DEVICES=" + test::two_gpu_node().gpus[0].uuid));
  bool config_ro = false;
  for (const auto& m : edits["mounts"]) {
    if (m["containerPath"] == "/etc/gpuslice")
      config_ro = std::find(m["options"].begin(), m["options"].end(), "ro") != m["options"].end();
  }
  EXPECT_TRUE(config_ro);
  ASSERT_EQ(edits["deviceNodes"].size(), 2u);  // only the nodes that exist on the host
}

// What the interposer believes about the claim's writer: read back through the library's own reader.
shm::Assignment assignment_of(const std::string& channel_dir, const std::string& writer,
                              const std::string& uuid) {
  shm::Assignment out;
  fs::UniqueFd dir(::open(channel_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  EXPECT_GE(dir.get(), 0) << channel_dir;
  EXPECT_TRUE(shm::NodeChannel::read_assignment(dir.get(), writer.c_str(), uuid, &out))
      << "no believed " << writer << ".assigned in " << channel_dir;
  return out;
}

TEST_F(DraPrepare, ThePriorityGoesIntoTheLimitsFileAndTheAssignmentAndUnprepareRemovesIt) {
  claims.claims["team-a/train-gpu"] = allocated_claim("uid-1", {{}}, slice_config({{"priority", "high"}}));
  auto o = preparer_options();
  o.priority_high_namespaces = {"ops", "team-a"};
  ClaimPreparer p(o, claims);
  ASSERT_TRUE(p.recover());
  ASSERT_TRUE(p.prepare({"team-a", "train-gpu", "uid-1"}));
  const std::string uuid = test::two_gpu_node().gpus[0].uuid;
  const std::string assigned = tmp / "root/channel/dra-uid-1.assigned";
  EXPECT_EQ(node::test::read_file(assigned), "priority=high\ncompute." + uuid + "=30\n");
  struct stat st {};
  ASSERT_EQ(::stat(assigned.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u) << "the container must not be able to raise its assignment";
  const auto believed = assignment_of(tmp / "root/channel", "dra-uid-1", uuid);
  EXPECT_EQ(believed.priority, Priority::High);
  EXPECT_EQ(believed.compute_percent, 30u);
  EXPECT_EQ(config::read_limits_file(container("uid-1") + "/config/limits")->priority, Priority::High);
  ASSERT_TRUE(p.unprepare("uid-1"));
  EXPECT_FALSE(exists(assigned));
  EXPECT_FALSE(exists(tmp / "root/channel/dra-uid-1"));
}

TEST_F(DraPrepare, APriorityWithoutAComputeLimitStillJoinsTheNodeChannel) {
  test::Result memory_only;
  memory_only.consumed = {{"memory", "8Gi"}};
  claims.claims["team-a/c"] =
      allocated_claim("uid-1", {memory_only}, slice_config({{"priority", "low"}}), "team-a", "c");
  ClaimPreparer p(preparer_options(), claims);
  ASSERT_TRUE(p.recover());
  ASSERT_TRUE(p.prepare({"team-a", "c", "uid-1"}));
  EXPECT_EQ(node::test::read_file(tmp / "root/channel/dra-uid-1.assigned"), "priority=low\n");
  auto limits = config::read_limits_file(container("uid-1") + "/config/limits");
  ASSERT_TRUE(limits) << limits.error();
  EXPECT_EQ(limits->priority, Priority::Low);
  EXPECT_FALSE(limits->compute);
  auto cdi = nlohmann::json::parse(node::test::read_file(spec("uid-1")));
  auto env = cdi["devices"][0]["containerEdits"]["env"].get<std::vector<std::string>>();
  EXPECT_NE(std::find(env.begin(), env.end(), "GPUSLICE_NODE_WRITER=dra-uid-1"), env.end());
}

TEST_F(DraPrepare, AClaimWithoutAPriorityIsAssignedNormalAndItsLimitsFileNamesNone) {
  claims.claims["team-a/train-gpu"] = allocated_claim("uid-1", {{}});
  ClaimPreparer p(preparer_options(), claims);
  ASSERT_TRUE(p.recover());
  ASSERT_TRUE(p.prepare({"team-a", "train-gpu", "uid-1"}));
  const std::string uuid = test::two_gpu_node().gpus[0].uuid;
  EXPECT_EQ(node::test::read_file(tmp / "root/channel/dra-uid-1.assigned"),
            "priority=normal\ncompute." + uuid + "=30\n");
  EXPECT_FALSE(config::read_limits_file(container("uid-1") + "/config/limits")->priority);
}

// A tenant writes its own claim (and may pick any DeviceClass): asking for high outside the
// namespaces the operator named is refused with a clear error, and nothing is prepared.
TEST_F(DraPrepare, AHostileClaimAskingForHighOutsideTheAllowedNamespacesIsRefused) {
  claims.claims["team-b/greedy"] =
      allocated_claim("uid-g", {{}}, slice_config({{"priority", "high"}}), "team-b", "greedy");
  auto from_class = allocated_claim("uid-k", {{}}, nullptr, "team-b", "via-class");
  from_class["status"]["allocation"]["devices"]["config"] = nlohmann::json::array(
      {{{"source", "FromClass"},
        {"opaque", {{"driver", "gpuslice.io"}, {"parameters", slice_config({{"priority", "high"}})}}}}});
  claims.claims["team-b/via-class"] = from_class;
  claims.claims["team-b/modest"] =
      allocated_claim("uid-m", {{}}, slice_config({{"priority", "normal"}}), "team-b", "modest");
  auto o = preparer_options();
  o.priority_high_namespaces = {"team-a"};
  ClaimPreparer p(o, claims);
  ASSERT_TRUE(p.recover());
  for (const auto& [name, uid] : {std::pair{"greedy", "uid-g"}, std::pair{"via-class", "uid-k"}}) {
    SCOPED_TRACE(name);
    auto refused = p.prepare({"team-b", name, uid});
    ASSERT_FALSE(refused);
    EXPECT_NE(refused.error().find("priority high"), std::string::npos) << refused.error();
    EXPECT_NE(refused.error().find("\"team-b\""), std::string::npos) << refused.error();
    EXPECT_NE(refused.error().find("--priority-high-namespaces"), std::string::npos) << refused.error();
    EXPECT_FALSE(exists(container(uid)));
    EXPECT_FALSE(exists(tmp / ("root/channel/dra-" + std::string(uid) + ".assigned")));
    EXPECT_FALSE(exists(spec(uid)));
  }
  EXPECT_TRUE(p.prepare({"team-b", "modest", "uid-m"})) << "normal needs no permission";
  EXPECT_EQ(p.claims().size(), 1u);
}

TEST_F(DraPrepare, AClaimOfTheWholeGpuDeviceGetsAllOfItsMemoryAndNoComputeLimit) {
  test::Result whole;
  whole.device = "gpu-1-whole";
  whole.consumed = nullptr;
  whole.share_id.clear();
  claims.claims["team-a/whole"] = allocated_claim("uid-w", {whole}, nullptr, "team-a", "whole");
  ClaimPreparer p(preparer_options(), claims);
  ASSERT_TRUE(p.recover());
  auto devices = p.prepare({"team-a", "whole", "uid-w"});
  ASSERT_TRUE(devices) << devices.error();
  ASSERT_EQ(devices->size(), 1u);
  EXPECT_EQ((*devices)[0].device, "gpu-1-whole");
  EXPECT_EQ((*devices)[0].gpu_uuid, test::two_gpu_node().gpus[1].uuid);
  EXPECT_EQ((*devices)[0].memory_bytes, 80ULL << 30);
  EXPECT_EQ((*devices)[0].compute_percent, 100u);
  auto limits = config::read_limits_file(container("uid-w") + "/config/limits");
  ASSERT_TRUE(limits) << limits.error();
  EXPECT_EQ(limits->memory->text, std::to_string(80ULL << 30));
  EXPECT_FALSE(limits->compute) << "a whole GPU has no compute fraction";
  EXPECT_FALSE(exists(tmp / "root/channel/dra-uid-w")) << "no compute share, no priority: no channel";
  auto cdi = nlohmann::json::parse(node::test::read_file(spec("uid-w")));
  auto env = cdi["devices"][0]["containerEdits"]["env"].get<std::vector<std::string>>();
  EXPECT_NE(std::find(env.begin(), env.end(), "NVIDIA_VISIBLE_DEVICES=" + test::two_gpu_node().gpus[1].uuid),
            env.end());
}

TEST_F(DraPrepare, PrepareIsIdempotentAndUnprepareRemovesEverything) {
  claims.claims["team-a/train-gpu"] = allocated_claim("uid-1", {{}});
  ClaimPreparer p(preparer_options(), claims);
  ASSERT_TRUE(p.recover());
  ASSERT_TRUE(p.prepare({"team-a", "train-gpu", "uid-1"}));
  ASSERT_TRUE(p.prepare({"team-a", "train-gpu", "uid-1"}));
  EXPECT_EQ(claims.calls, 1) << "a prepared claim is answered from the checkpoint";
  EXPECT_TRUE(exists(tmp / "root/channel/dra-uid-1"));
  EXPECT_TRUE(exists(tmp / "root/channel/dra-uid-1.assigned"));
  ASSERT_TRUE(p.unprepare("uid-1"));
  EXPECT_FALSE(exists(tmp / "root/channel/dra-uid-1.assigned"));
  EXPECT_FALSE(exists(container("uid-1")));
  EXPECT_FALSE(exists(spec("uid-1")));
  EXPECT_FALSE(exists(tmp / "root/channel/dra-uid-1"));
  EXPECT_TRUE(p.claims().empty());
  EXPECT_TRUE(p.unprepare("uid-1")) << "unprepare of an unknown claim succeeds";
}

TEST_F(DraPrepare, TwoClaimsShareOneGpuWithTheirOwnLimits) {
  claims.claims["team-a/a"] = allocated_claim("uid-a", {{}}, nullptr, "team-a", "a");
  test::Result second;
  second.consumed = {{"memory", "16Gi"}, {"compute", "50"}};
  second.share_id = "6f1a0e5c-0000-4000-8000-000000000002";
  claims.claims["team-b/b"] = allocated_claim("uid-b", {second}, nullptr, "team-b", "b");
  ClaimPreparer p(preparer_options(), claims);
  ASSERT_TRUE(p.recover());
  ASSERT_TRUE(p.prepare({"team-a", "a", "uid-a"}));
  ASSERT_TRUE(p.prepare({"team-b", "b", "uid-b"}));
  EXPECT_EQ(config::read_limits_file(container("uid-b") + "/config/limits")->memory->text,
            std::to_string(16ULL << 30));
  EXPECT_EQ(config::read_limits_file(container("uid-a") + "/config/limits")->compute->text, "30");
  EXPECT_EQ(p.claims().size(), 2u);
}

TEST_F(DraPrepare, TwoGpusAreLimitedPerUuid) {
  test::Result second;
  second.device = "gpu-1";
  second.consumed = {{"memory", "4Gi"}};
  claims.claims["team-a/train-gpu"] = allocated_claim("uid-1", {{}, second});
  ClaimPreparer p(preparer_options(), claims);
  ASSERT_TRUE(p.recover());
  ASSERT_TRUE(p.prepare({"team-a", "train-gpu", "uid-1"}));
  auto file = config::read_limits_file(container("uid-1") + "/config/limits");
  ASSERT_TRUE(file) << file.error();
  auto memory = nlohmann::json::parse(file->memory->text);
  EXPECT_EQ(memory[test::two_gpu_node().gpus[1].uuid], 4ULL << 30);
  auto compute = nlohmann::json::parse(file->compute->text);
  EXPECT_EQ(compute.size(), 1u) << "gpu-1 had no compute share scheduled: no compute limit there";
}

TEST_F(DraPrepare, HostileClaimsPrepareNothing) {
  test::Result other;
  other.pool = "node-b";
  claims.claims["team-a/foreign"] = allocated_claim("uid-f", {other}, nullptr, "team-a", "foreign");
  claims.claims["team-a/bad"] =
      allocated_claim("uid-b", {{}}, slice_config({{"memory", {{"limit", "1Ti"}}}}), "team-a", "bad");
  ClaimPreparer p(preparer_options(), claims);
  ASSERT_TRUE(p.recover());
  auto foreign = p.prepare({"team-a", "foreign", "uid-f"});
  ASSERT_FALSE(foreign);
  EXPECT_NE(foreign.error().find("another node"), std::string::npos);
  auto bad = p.prepare({"team-a", "bad", "uid-b"});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().find("above"), std::string::npos) << bad.error();
  EXPECT_FALSE(p.prepare({"team-a", "missing", "uid-m"}));
  EXPECT_FALSE(p.prepare({"team-a", "x", "../../etc"})) << "a uid is never a path";
  EXPECT_TRUE(p.claims().empty());
  EXPECT_FALSE(exists(tmp / "root/containers/dra-uid-f"));
  EXPECT_FALSE(exists(tmp / "cdi"));
}

// The daemon is killed after each step of a prepare in turn; a new daemon removes what the dead one
// left, the kubelet's retry prepares the claim afresh, and nothing is left after unprepare.
TEST_F(DraPrepare, ADaemonKilledMidPrepareRecoversAndLeaksNothing) {
  for (const char* crash_at : {"checkpointed", "directories", "limits", "cdi"}) {
    SCOPED_TRACE(crash_at);
    claims.claims["team-a/train-gpu"] = allocated_claim("uid-1", {{}});
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      auto o = preparer_options();
      const std::string at = crash_at;
      o.after_step = [at](const char* step) {
        if (at == step) ::_exit(9);  // as SIGKILL: no destructor, no cleanup
      };
      ClaimPreparer p(o, claims);
      if (!p.recover()) ::_exit(1);
      (void)p.prepare({"team-a", "train-gpu", "uid-1"});
      ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    ASSERT_EQ(WEXITSTATUS(status), 9);
    EXPECT_TRUE(exists(container("uid-1")) || std::string(crash_at) == "checkpointed");

    ClaimPreparer restarted(preparer_options(), claims);
    ASSERT_TRUE(restarted.recover());
    EXPECT_FALSE(exists(container("uid-1"))) << "the half-prepared claim's files are removed";
    EXPECT_FALSE(exists(tmp / "root/channel/dra-uid-1.assigned"));
    EXPECT_FALSE(exists(spec("uid-1")));
    EXPECT_TRUE(restarted.claims().empty());
    ASSERT_TRUE(restarted.prepare({"team-a", "train-gpu", "uid-1"}));
    ASSERT_TRUE(exists(spec("uid-1")));
    ASSERT_TRUE(restarted.unprepare("uid-1"));
    EXPECT_FALSE(exists(container("uid-1")));
  }
}

TEST_F(DraPrepare, APreparedClaimSurvivesARestart) {
  claims.claims["team-a/train-gpu"] = allocated_claim("uid-1", {{}});
  {
    ClaimPreparer p(preparer_options(), claims);
    ASSERT_TRUE(p.recover());
    ASSERT_TRUE(p.prepare({"team-a", "train-gpu", "uid-1"}));
  }
  ClaimPreparer restarted(preparer_options(), claims);
  ASSERT_TRUE(restarted.recover());
  EXPECT_TRUE(exists(container("uid-1")));
  ASSERT_EQ(restarted.claims().size(), 1u);
  EXPECT_TRUE(restarted.prepare({"team-a", "train-gpu", "uid-1"}));
  EXPECT_EQ(claims.calls, 1);
}

TEST_F(DraPrepare, MetricsLabelAClaimWithItsNamespacePodAndName) {
  claims.claims["team-a/train-gpu"] = allocated_claim("uid-1", {{}});
  ClaimPreparer p(preparer_options(), claims);
  ASSERT_TRUE(p.recover());
  ASSERT_TRUE(p.prepare({"team-a", "train-gpu", "uid-1"}));
  node::test::FakeClock clock;
  Collector collector(HostLayout(tmp / "root"), nullptr, clock);
  ClaimAttribution attribution(p);
  collector.set_attribution(&attribution, 0);
  auto view = collector.refresh();
  ASSERT_EQ(view->containers.size(), 1u);
  EXPECT_EQ(view->containers[0].id, "dra-uid-1");
  EXPECT_EQ(view->containers[0].owner.namespace_name, "team-a");
  EXPECT_EQ(view->containers[0].owner.pod, "train-gpu-pod");
  EXPECT_EQ(view->containers[0].owner.container, "claim/train-gpu");
  ASSERT_TRUE(view->containers[0].limits.memory);
  EXPECT_EQ(*view->containers[0].limits.memory, std::to_string(8ULL << 30));
  const std::string metrics = render_metrics(*view, "test");
  EXPECT_NE(metrics.find("pod=\"train-gpu-pod\""), std::string::npos);
  EXPECT_NE(metrics.find("container=\"claim/train-gpu\""), std::string::npos);
}

TEST_F(DraPrepare, AClaimDirectoryNoCheckpointNamesIsRemoved) {
  std::filesystem::create_directories(container("uid-orphan") + "/state");
  ClaimPreparer p(preparer_options(), claims);
  ASSERT_TRUE(p.recover());
  EXPECT_FALSE(exists(container("uid-orphan")));
}

TEST_F(DraPrepare, UnderMpsTheCdiSpecMountsThePipeDirectoryAndNamesIt) {
  test::Result memory_only;
  memory_only.consumed = {{"memory", "8Gi"}};
  claims.claims["team-a/c"] = allocated_claim("uid-1", {memory_only}, slice_config({}), "team-a", "c");
  PreparerOptions options = preparer_options();
  options.mps_pipe_dir = "/run/gpuslice/mps/pipe";
  ClaimPreparer p(options, claims);
  ASSERT_TRUE(p.recover());
  ASSERT_TRUE(p.prepare({"team-a", "c", "uid-1"}));
  auto cdi = nlohmann::json::parse(node::test::read_file(spec("uid-1")));
  const auto& edits = cdi["devices"][0]["containerEdits"];
  auto env = edits["env"].get<std::vector<std::string>>();
  EXPECT_NE(std::find(env.begin(), env.end(), "CUDA_MPS_PIPE_DIRECTORY=/run/gpuslice/mps/pipe"), env.end());
  bool mounted = false;
  for (const auto& m : edits["mounts"])
    mounted |= m["hostPath"] == "/run/gpuslice/mps/pipe" && m["containerPath"] == "/run/gpuslice/mps/pipe";
  EXPECT_TRUE(mounted) << edits.dump();
}

}  // namespace
}  // namespace gpuslice::node::dra
