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
#include "node/api/metrics.h"
#include "node/dra/cdi_spec.h"
#include "node/dra/claim_attribution.h"
#include "node/dra/claim_preparer.h"
#include "node/node_view/collector.h"
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

TEST_F(DraPrepare, TheMemoryRequestIsWrittenAsTheGuaranteeBesideTheLimit) {
  claims.claims["team-a/c"] =
      allocated_claim("uid-1", {{}}, slice_config({{"memory", {{"request", "2Gi"}}}}), "team-a", "c");
  ClaimPreparer p(preparer_options(), claims);
  ASSERT_TRUE(p.recover());
  auto devices = p.prepare({"team-a", "c", "uid-1"});
  ASSERT_TRUE(devices) << devices.error();
  EXPECT_EQ((*devices)[0].guarantee_bytes, 2ULL << 30);
  auto limits = config::read_limits_file(container("uid-1") + "/config/limits");
  ASSERT_TRUE(limits) << limits.error();
  EXPECT_EQ(limits->memory->text, std::to_string(8ULL << 30));
  ASSERT_TRUE(limits->guarantee);
  EXPECT_EQ(limits->guarantee->text, std::to_string(2ULL << 30));
  auto cdi = nlohmann::json::parse(node::test::read_file(spec("uid-1")));
  auto env = cdi["devices"][0]["containerEdits"]["env"].get<std::vector<std::string>>();
  EXPECT_NE(std::find(env.begin(), env.end(), "GPUSLICE_MEMORY_GUARANTEE=" + std::to_string(2ULL << 30)),
            env.end());
  ClaimPreparer restarted(preparer_options(), claims);
  ASSERT_TRUE(restarted.recover());
  ASSERT_EQ(restarted.claims().size(), 1u);
  EXPECT_EQ(restarted.claims()[0].entry.devices[0].guarantee_bytes, 2ULL << 30) << "checkpointed";
}

TEST_F(DraPrepare, LimitsMayOvercommitAGpuButGuaranteesNever) {
  // 80 GiB GPU: three claims of 60 GiB each (180 GiB of limits) with guarantees of 50, 40 and 30 GiB.
  const auto claim = [&](const std::string& uid, const char* request, int share) {
    test::Result r;
    r.consumed = {{"memory", "60Gi"}};
    r.share_id = "6f1a0e5c-0000-4000-8000-00000000000" + std::to_string(share);
    claims.claims["team-a/" + uid] =
        allocated_claim(uid, {r}, slice_config({{"memory", {{"request", request}}}}), "team-a", uid);
  };
  claim("uid-a", "50Gi", 1);
  claim("uid-b", "40Gi", 2);
  claim("uid-c", "30Gi", 3);
  ClaimPreparer p(preparer_options(), claims);
  ASSERT_TRUE(p.recover());
  ASSERT_TRUE(p.prepare({"team-a", "uid-a", "uid-a"}));
  auto refused = p.prepare({"team-a", "uid-b", "uid-b"});
  ASSERT_FALSE(refused) << "50 + 40 GiB guaranteed on an 80 GiB GPU";
  EXPECT_NE(refused.error().find("guarantees never overcommit a GPU"), std::string::npos) << refused.error();
  EXPECT_NE(refused.error().find("(53687091200 bytes)"), std::string::npos) << refused.error();
  EXPECT_FALSE(exists(container("uid-b"))) << "a refused claim leaves nothing behind";
  ASSERT_TRUE(p.prepare({"team-a", "uid-c", "uid-c"})) << "50 + 30 GiB: exactly the GPU";
  ASSERT_TRUE(p.unprepare("uid-a"));
  auto after = p.prepare({"team-a", "uid-b", "uid-b"});
  EXPECT_TRUE(after) << "30 + 40 GiB once the first is released: " << (after ? "" : after.error());
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

namespace gpuslice::node::dra {
namespace {

// A claim of `n` shares of gpu-0 (as many results as resource.k8s.io/v1 allows at most: 32).
nlohmann::json claim_of_shares(const std::string& uid, int n) {
  std::vector<test::Result> results;
  for (int i = 0; i < n; ++i) {
    test::Result r;
    r.consumed = {{"memory", "1Gi"}, {"compute", "1"}};
    char id[64];
    std::snprintf(id, sizeof id, "6f1a0e5c-0000-4000-8000-%012d", i);
    r.share_id = id;
    results.push_back(r);
  }
  return allocated_claim(uid, results, nullptr, "team-a", "c-" + uid);
}

TEST_F(DraPrepare, AClaimThatWouldPassTheCheckpointsBoundIsRefusedAndAllWrittenIsReadBack) {
  auto o = preparer_options();
  o.max_checkpoint_bytes = 64 * 1024;
  ClaimPreparer p(o, claims);
  ASSERT_TRUE(p.recover());
  int prepared = 0;
  std::string refused;
  for (int i = 0; i < 200 && refused.empty(); ++i) {
    const std::string uid = "uid-" + std::to_string(i);
    claims.claims["team-a/c-" + uid] = claim_of_shares(uid, 32);
    auto r = p.prepare({"team-a", "c-" + uid, uid});
    if (r) {
      ++prepared;
    } else {
      refused = r.error();
      EXPECT_FALSE(exists(container(uid))) << "nothing is created for a refused claim";
    }
  }
  ASSERT_FALSE(refused.empty()) << "the bound was never reached";
  EXPECT_NE(refused.find("checkpoint"), std::string::npos) << refused;
  EXPECT_GT(prepared, 3);
  ClaimPreparer restarted(o, claims);
  auto r = restarted.recover();
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(restarted.claims().size(), static_cast<std::size_t>(prepared));
}

TEST_F(DraPrepare, AClaimOfMoreResultsThanTheApiAllowsIsRefused) {
  claims.claims["team-a/c-uid-x"] = claim_of_shares("uid-x", 33);
  ClaimPreparer p(preparer_options(), claims);
  ASSERT_TRUE(p.recover());
  EXPECT_FALSE(p.prepare({"team-a", "c-uid-x", "uid-x"}));
}

// Each prepare costs the checkpoint about one entry, not the whole file again.
TEST_F(DraPrepare, APrepareWritesItsEntryNotTheWholeCheckpoint) {
  ClaimPreparer p(preparer_options(), claims);
  ASSERT_TRUE(p.recover());
  std::uint64_t first = 0;
  for (int i = 0; i < 25; ++i) {
    const std::string uid = "uid-" + std::to_string(i);
    claims.claims["team-a/c-" + uid] = claim_of_shares(uid, 8);
    ASSERT_TRUE(p.prepare({"team-a", "c-" + uid, uid}));
    if (i == 0) first = p.checkpoint_bytes_written();
  }
  // Rewriting the whole file each time writes 25 * 26 / 2 times the first prepare's bytes; one
  // entry a prepare writes 25 times (and the folds of the journal, each at most the state).
  EXPECT_LT(p.checkpoint_bytes_written(), 25 * first * 3) << first;
  ClaimPreparer restarted(preparer_options(), claims);
  ASSERT_TRUE(restarted.recover());
  EXPECT_EQ(restarted.claims().size(), 25u);
}

// A corrupt entry costs that claim only; paths never come from the file, so a planted
// "../../victim" removes nothing outside the claim's own directories.
TEST_F(DraPrepare, RecoveryKeepsGoingPastABadEntryAndNeverTrustsItsPaths) {
  claims.claims["team-a/train-gpu"] = allocated_claim("uid-1", {{}});
  {
    ClaimPreparer p(preparer_options(), claims);
    ASSERT_TRUE(p.recover());
    ASSERT_TRUE(p.prepare({"team-a", "train-gpu", "uid-1"}));
  }
  const std::string victim = tmp / "victim";
  node::test::write_file(victim, "precious");
  std::filesystem::create_directories(tmp / "victim-dir");
  node::test::write_file(tmp / "victim-dir/file", "precious");
  nlohmann::json doc = {{"version", 1}, {"claims", nlohmann::json::object()}};
  std::string base;
  {
    ClaimPreparer p(preparer_options(), claims);
    ASSERT_TRUE(p.recover());
    ASSERT_EQ(p.claims().size(), 1u);
    base = p.checkpoint_path();
    doc["claims"]["uid-1"] =
        nlohmann::json::parse(checkpoint_entry_text("uid-1", p.claims()[0].entry))["entry"];
  }
  doc["claims"]["uid-bad"] = {{"state", "prepared"}, {"namespace", 7}};
  nlohmann::json planted = doc["claims"]["uid-1"];
  planted["state"] = "preparing";
  planted["container"] = "../../victim-dir";
  planted["cdiFile"] = victim;
  planted["channelWriter"] = "../../victim-dir";
  doc["claims"]["uid-planted"] = planted;
  doc["claims"]["../x"] = planted;
  ASSERT_TRUE(write_file_atomically(base, doc.dump(), 0600));
  ::unlink((tmp / "root/dra/checkpoint.journal").c_str());
  node::test::write_file(tmp / "root/dra/checkpoint.journal", "{\"uid\":\"uid-1\",\"entr");  // torn line
  ::chmod((tmp / "root/dra/checkpoint.journal").c_str(), 0600);

  ClaimPreparer restarted(preparer_options(), claims);
  auto r = restarted.recover();
  ASSERT_TRUE(r) << r.error();
  ASSERT_EQ(restarted.claims().size(), 1u) << "the good claim survives the bad ones";
  EXPECT_EQ(restarted.claims()[0].uid, "uid-1");
  EXPECT_TRUE(exists(victim)) << "a planted path removed a file outside the claim's directories";
  EXPECT_TRUE(exists(tmp / "victim-dir/file"));
  EXPECT_TRUE(exists(container("uid-1")));
}

// One prepare per uid: a second name for a prepared uid does not get the first claim's devices.
TEST_F(DraPrepare, APreparedUidAskedForUnderAnotherNameGetsNothing) {
  claims.claims["team-a/train-gpu"] = allocated_claim("uid-1", {{}});
  ClaimPreparer p(preparer_options(), claims);
  ASSERT_TRUE(p.recover());
  ASSERT_TRUE(p.prepare({"team-a", "train-gpu", "uid-1"}));
  auto other = p.prepare({"team-b", "not-mine", "uid-1"});
  ASSERT_FALSE(other);
  EXPECT_NE(other.error().find("prepared for claim team-a/train-gpu"), std::string::npos) << other.error();
  EXPECT_TRUE(p.prepare({"team-a", "train-gpu", "uid-1"})) << "the kubelet's retry still works";
}

// Peer text with control bytes never reaches the log, the labels or the checkpoint raw.
TEST_F(DraPrepare, ControlBytesFromTheKubeletOrTheApiServerAreRefusedOrDropped) {
  auto claim = allocated_claim("uid-1", {{}});
  claim["status"]["reservedFor"][0]["name"] = "pod\x1b[2J\nforged";
  claims.claims["team-a/train-gpu"] = claim;
  ClaimPreparer p(preparer_options(), claims);
  ASSERT_TRUE(p.recover());
  auto bad = p.prepare({"team-a\x1b[2J", "train-gpu", "uid-1"});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().find('\x1b'), std::string::npos) << "the error is escaped";
  ASSERT_TRUE(p.prepare({"team-a", "train-gpu", "uid-1"}));
  ASSERT_EQ(p.claims().size(), 1u);
  EXPECT_EQ(p.claims()[0].entry.pod, "") << "a pod name that is no object name is not kept";
  ClaimAttribution attribution(p);
  auto listed = attribution.list();
  ASSERT_TRUE(listed);
  for (const auto& l : *listed) EXPECT_EQ(l.owner.pod.find('\x1b'), std::string::npos);
}

}  // namespace
}  // namespace gpuslice::node::dra
