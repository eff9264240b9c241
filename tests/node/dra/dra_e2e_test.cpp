// End to end on the simulated driver: claims prepared by the DRA plugin, then real processes under
// the real libgpuslice.so started the way a CDI-enabled runtime starts a container of the claim
// (the spec's variables, its mounts' host paths in place of the container paths). The tenant asks
// for the whole card; the read-only limits file the plugin wrote holds it to what was scheduled.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <thread>

#include "../../e2e/process.h"
#include "../test_util.h"
#include "dra_test_util.h"
#include "node/dra/cdi_spec.h"
#include "node/dra/claim_preparer.h"

namespace gpuslice::node::dra {
namespace {

using gpuslice::test::Background;
using gpuslice::test::Env;
using gpuslice::test::Outcome;

constexpr long long kMiB = 1LL << 20, kGiB = 1LL << 30;
constexpr long long kContextBytes = 64 * kMiB;

class DraE2E : public ::testing::Test, protected test::PreparerFixture {
 protected:
  void SetUp() override {
    PreparerOptions o = preparer_options();
    for (auto& g : o.node.gpus) g.memory_total_bytes = 16 * kGiB;  // the simulated GPUs
    start_preparer(o);
  }

  // The environment of a process in a container of claim `uid`: the simulated driver's, then the
  // CDI spec's variables with container paths mapped to the host paths the spec mounts there.
  Env container_env(const std::string& uid) {
    Env env =
        gpuslice::test::mock_container_env(tmp.path(), 2, kContextBytes, GPUSLICE_MOCK_DIR, GPUSLICE_PRELOAD);
    auto spec = nlohmann::json::parse(node::test::read_file(tmp / ("cdi/" + cdi_spec_file_name(uid))));
    const auto& edits = spec["devices"][0]["containerEdits"];
    std::map<std::string, std::string> host_of;
    for (const auto& m : edits["mounts"]) host_of[m["containerPath"]] = m["hostPath"];
    for (const auto& e : edits["env"]) {
      std::string kv = e;
      const std::string key = kv.substr(0, kv.find('=')), value = kv.substr(kv.find('=') + 1);
      if (key == "LD_PRELOAD" || key == "NVIDIA_VISIBLE_DEVICES")
        continue;  // the library under test; no real GPUs
      env[key] = value;
    }
    env["GPUSLICE_SHARED_DIR"] = host_of.at(env["GPUSLICE_SHARED_DIR"]);
    env["GPUSLICE_LIMITS_FILE"] = host_of.at("/etc/gpuslice") + "/limits";
    if (env.count("GPUSLICE_NODE_DIR")) env["GPUSLICE_NODE_DIR"] = host_of.at(env["GPUSLICE_NODE_DIR"]);
    // A hostile tenant overrides the variables: the read-only file still caps it.
    env["GPUSLICE_MEMORY_LIMIT"] = "16Gi";
    env["GPUSLICE_COMPUTE_LIMIT"] = "100";
    return env;
  }

  Outcome fill(const Env& env) {
    return gpuslice::test::run(
        {GPUSLICE_PROBE_APP, "--scenario", "fill", "--chunk", std::to_string(256 * kMiB)}, env);
  }
};

TEST_F(DraE2E, AClaimOf8GiBAnd30PercentIsEnforcedAndASecondClaimSharesTheGpu) {
  claims.claims["team-a/train-gpu"] = test::allocated_claim("uid-1", {{}});
  ASSERT_TRUE(preparer->prepare({"team-a", "train-gpu", "uid-1"}));
  Env env = container_env("uid-1");
  Outcome first = fill(env);
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  EXPECT_EQ(first.num("total"), 8 * kGiB);
  EXPECT_EQ(first.num("refused_code"), 2)
      << "the allocation past 8 GiB is refused (CUDA_ERROR_OUT_OF_MEMORY)";
  EXPECT_LE(first.num("allocated"), 8 * kGiB - kContextBytes);

  // Compute: a launching process runs at the claim's 30%, whatever it asks for.
  Background app({GPUSLICE_PROBE_APP, "--scenario", "launch", "--iterations", "2000", "--kernel-us", "500"},
                 env, tmp / "launch.out");
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  Outcome status = gpuslice::test::run(
      {GPUSLICE_CLI, "status", "--json", "--shared-dir", env["GPUSLICE_SHARED_DIR"]},
      gpuslice::test::mock_container_env(tmp.path(), 2, kContextBytes, GPUSLICE_MOCK_DIR, nullptr));
  app.kill();
  app.wait();
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_NE(status.out.find("\"compute_limit_percent\":30"), std::string::npos) << status.out;

  // A second claim on the same GPU, with its own 4 GiB.
  test::Result second;
  second.consumed = {{"memory", "4Gi"}, {"compute", "50"}};
  second.share_id = "6f1a0e5c-0000-4000-8000-000000000002";
  claims.claims["team-b/infer"] = test::allocated_claim("uid-2", {second}, nullptr, "team-b", "infer");
  ASSERT_TRUE(preparer->prepare({"team-b", "infer", "uid-2"}));
  Outcome other = fill(container_env("uid-2"));
  ASSERT_EQ(other.exit_code, 0) << other.err;
  EXPECT_EQ(other.num("total"), 4 * kGiB);

  // Unprepare frees: the claim's files are gone, the other claim's stay.
  ASSERT_TRUE(preparer->unprepare("uid-1"));
  EXPECT_NE(::access((tmp / "root/containers/dra-uid-1").c_str(), F_OK), 0);
  EXPECT_EQ(::access((tmp / "root/containers/dra-uid-2/config/limits").c_str(), F_OK), 0);
  ASSERT_TRUE(preparer->unprepare("uid-2"));
}

// The claim's level is written where the tenant cannot change it: a process whose own environment
// asks for high runs at the claim's low (the read-only limits file is its ceiling).
TEST_F(DraE2E, AProcessRunsAtNoMoreThanTheClaimsPriority) {
  claims.claims["team-a/train-gpu"] =
      test::allocated_claim("uid-1", {{}}, test::slice_config({{"priority", "low"}}));
  ASSERT_TRUE(preparer->prepare({"team-a", "train-gpu", "uid-1"}));
  Env env = container_env("uid-1");
  EXPECT_EQ(env["GPUSLICE_PRIORITY"], "low");
  env["GPUSLICE_PRIORITY"] = "high";  // the tenant's override
  Background app({GPUSLICE_PROBE_APP, "--scenario", "launch", "--iterations", "2000", "--kernel-us", "500"},
                 env, tmp / "launch.out");
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  Outcome status = gpuslice::test::run(
      {GPUSLICE_CLI, "status", "--shared-dir", env["GPUSLICE_SHARED_DIR"]},
      gpuslice::test::mock_container_env(tmp.path(), 2, kContextBytes, GPUSLICE_MOCK_DIR, nullptr));
  app.kill();
  app.wait();
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_NE(status.out.find("Priority: low"), std::string::npos) << status.out;
}

TEST_F(DraE2E, TheClaimsTighterMemoryLimitIsWhatTheProcessGets) {
  claims.claims["team-a/train-gpu"] =
      test::allocated_claim("uid-1", {{}}, test::slice_config({{"memory", {{"limit", "2Gi"}}}}));
  ASSERT_TRUE(preparer->prepare({"team-a", "train-gpu", "uid-1"}));
  Outcome o = fill(container_env("uid-1"));
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(o.num("total"), 2 * kGiB);
}

}  // namespace
}  // namespace gpuslice::node::dra
