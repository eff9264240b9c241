#include <gtest/gtest.h>

#include "dra_test_util.h"

namespace gpuslice::node::dra {
namespace {

using test::allocated_claim;
using test::slice_config;

const ClaimRef kRef{"team-a", "train-gpu", "uid-1"};

TEST(DraClaimReader, ConsumedCapacityBecomesTheLimits) {
  auto a = read_claim_allocation(allocated_claim("uid-1", {{}}), kRef, test::two_gpu_node());
  ASSERT_TRUE(a) << a.error();
  ASSERT_EQ(a->devices.size(), 1u);
  EXPECT_EQ(a->devices[0].device, "gpu-0");
  EXPECT_EQ(a->devices[0].memory_bytes, 8ULL << 30);
  EXPECT_EQ(*a->devices[0].compute, 30u);
  EXPECT_FALSE(a->priority);
}

// An API server without DRAConsumableCapacity drops the claim's capacity request: the scheduler
// gives gpu-0 without consumed capacity, whatever the claim asked. Never prepared as a whole GPU
// silently: refused by default, whole or capped as the operator says, or the claim's own limit.
TEST(DraClaimReader, ASharedDeviceAllocatedWithoutConsumedCapacityIsRefusedOrAsTheOperatorSays) {
  test::Result dropped;
  dropped.consumed = nullptr;
  dropped.share_id.clear();
  auto refused = read_claim_allocation(allocated_claim("uid-1", {dropped}), kRef, test::two_gpu_node());
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().find("DRAConsumableCapacity"), std::string::npos) << refused.error();
  EXPECT_NE(refused.error().find("--dropped-capacity"), std::string::npos) << refused.error();

  DriverNode node = test::two_gpu_node();
  node.dropped_capacity = *parse_dropped_capacity("whole");
  auto whole = read_claim_allocation(allocated_claim("uid-1", {dropped}), kRef, node);
  ASSERT_TRUE(whole) << whole.error();
  EXPECT_EQ(whole->devices[0].memory_bytes, 80ULL << 30);
  EXPECT_FALSE(whole->devices[0].compute);
  EXPECT_NE(whole->devices[0].note.find("whole GPU"), std::string::npos);

  node.dropped_capacity = *parse_dropped_capacity("4Gi");
  auto capped = read_claim_allocation(allocated_claim("uid-1", {dropped}), kRef, node);
  ASSERT_TRUE(capped) << capped.error();
  EXPECT_EQ(capped->devices[0].memory_bytes, 4ULL << 30);
  EXPECT_FALSE(capped->devices[0].note.empty());

  auto own = read_claim_allocation(
      allocated_claim("uid-1", {dropped}, slice_config({{"memory", {{"limit", "2Gi"}}}})), kRef,
      test::two_gpu_node());
  ASSERT_TRUE(own) << own.error();
  EXPECT_EQ(own->devices[0].memory_bytes, 2ULL << 30);

  EXPECT_FALSE(parse_dropped_capacity("all"));
  EXPECT_FALSE(parse_dropped_capacity("10"));
  EXPECT_FALSE(parse_dropped_capacity(""));
}

TEST(DraClaimReader, TheWholeGpuDeviceIsTheGpuUnsharedAndItsConfigMayStillTighten) {
  test::Result whole;
  whole.device = "gpu-1-whole";
  whole.consumed = nullptr;
  whole.share_id.clear();
  auto a =
      read_claim_allocation(allocated_claim("uid-1", {whole}, slice_config({{"compute", {{"limit", 50}}}})),
                            kRef, test::two_gpu_node());
  ASSERT_TRUE(a) << a.error();
  EXPECT_TRUE(a->devices[0].whole);
  EXPECT_EQ(a->devices[0].gpu.uuid, test::two_gpu_node().gpus[1].uuid);
  EXPECT_EQ(a->devices[0].memory_bytes, 80ULL << 30);
  EXPECT_EQ(*a->devices[0].compute, 50u);
}

TEST(DraClaimReader, AHostileWholeDeviceAllocationIsRefused) {
  test::Result whole;
  whole.device = "gpu-0-whole";
  whole.consumed = nullptr;
  whole.share_id.clear();
  test::Result with_capacity = whole;
  with_capacity.consumed = {{"memory", "8Gi"}};
  auto capacity =
      read_claim_allocation(allocated_claim("uid-1", {with_capacity}), kRef, test::two_gpu_node());
  ASSERT_FALSE(capacity);
  EXPECT_NE(capacity.error().find("no shareID or consumedCapacity"), std::string::npos) << capacity.error();
  test::Result shared_whole = whole;
  shared_whole.share_id = "6f1a0e5c-0000-4000-8000-000000000009";
  EXPECT_FALSE(read_claim_allocation(allocated_claim("uid-1", {shared_whole}), kRef, test::two_gpu_node()));
  // The same GPU whole and as a share in one claim: what the counters forbid across claims.
  auto both = read_claim_allocation(allocated_claim("uid-1", {{}, whole}), kRef, test::two_gpu_node());
  ASSERT_FALSE(both);
  EXPECT_NE(both.error().find("both whole"), std::string::npos) << both.error();
  test::Result unknown = whole;
  unknown.device = "gpu-7-whole";
  EXPECT_FALSE(read_claim_allocation(allocated_claim("uid-1", {unknown}), kRef, test::two_gpu_node()));
}

TEST(DraClaimReader, TheClaimsConfigMayOnlyTightenWhatWasScheduled) {
  auto tighter = read_claim_allocation(
      allocated_claim("uid-1", {{}}, slice_config({{"memory", {{"limit", "6Gi"}}}, {"priority", "low"}})),
      kRef, test::two_gpu_node());
  ASSERT_TRUE(tighter) << tighter.error();
  EXPECT_EQ(tighter->devices[0].memory_bytes, 6ULL << 30);
  EXPECT_EQ(*tighter->priority, config::Priority::Low);
  auto looser =
      read_claim_allocation(allocated_claim("uid-1", {{}}, slice_config({{"compute", {{"limit", 50}}}})),
                            kRef, test::two_gpu_node());
  ASSERT_FALSE(looser);
  EXPECT_NE(looser.error().find("compute.limit 50 is above the 30%"), std::string::npos) << looser.error();
}

TEST(DraClaimReader, TheMemoryRequestIsTheGuaranteeWithinTheLimit) {
  auto none = read_claim_allocation(allocated_claim("uid-1", {{}}), kRef, test::two_gpu_node());
  ASSERT_TRUE(none) << none.error();
  EXPECT_EQ(none->devices[0].guarantee_bytes, 0u) << "no memory.request: no guarantee";
  auto some =
      read_claim_allocation(allocated_claim("uid-1", {{}}, slice_config({{"memory", {{"request", "3Gi"}}}})),
                            kRef, test::two_gpu_node());
  ASSERT_TRUE(some) << some.error();
  EXPECT_EQ(some->devices[0].guarantee_bytes, 3ULL << 30);
  EXPECT_EQ(some->devices[0].memory_bytes, 8ULL << 30) << "the limit is what was scheduled";
  auto above =
      read_claim_allocation(allocated_claim("uid-1", {{}}, slice_config({{"memory", {{"request", "10Gi"}}}})),
                            kRef, test::two_gpu_node());
  ASSERT_FALSE(above);
  EXPECT_NE(above.error().find("memory.request 10737418240 is above the 8589934592 bytes"), std::string::npos)
      << above.error();
  auto above_limit = read_claim_allocation(
      allocated_claim("uid-1", {{}}, slice_config({{"memory", {{"request", "4Gi"}, {"limit", "2Gi"}}}})),
      kRef, test::two_gpu_node());
  ASSERT_FALSE(above_limit) << "request above the config's own limit";
}

TEST(DraClaimReader, MalformedParametersAreAClearErrorOnTheClaim) {
  auto a =
      read_claim_allocation(allocated_claim("uid-1", {{}}, slice_config({{"memory", {{"limit", "lots"}}}})),
                            kRef, test::two_gpu_node());
  ASSERT_FALSE(a);
  EXPECT_NE(a.error().find("request \"gpu\": memory.limit: \"lots\""), std::string::npos) << a.error();
}

TEST(DraClaimReader, DevicesOfAnotherNodeAreRefused) {
  test::Result other;
  other.pool = "node-b";
  auto a = read_claim_allocation(allocated_claim("uid-1", {other}), kRef, test::two_gpu_node());
  ASSERT_FALSE(a);
  EXPECT_NE(a.error().find("belongs to another node"), std::string::npos) << a.error();
}

TEST(DraClaimReader, UnknownDevicesAndImpossibleCapacitiesAreRefused) {
  test::Result unknown;
  unknown.device = "gpu-7";
  EXPECT_FALSE(read_claim_allocation(allocated_claim("uid-1", {unknown}), kRef, test::two_gpu_node()));
  test::Result huge;
  huge.consumed = {{"memory", "1Ti"}};
  EXPECT_FALSE(read_claim_allocation(allocated_claim("uid-1", {huge}), kRef, test::two_gpu_node()));
  test::Result over;
  over.consumed = {{"compute", "130"}};
  EXPECT_FALSE(read_claim_allocation(allocated_claim("uid-1", {over}), kRef, test::two_gpu_node()));
  test::Result strange;
  strange.consumed = {{"bandwidth", "1"}};
  EXPECT_FALSE(read_claim_allocation(allocated_claim("uid-1", {strange}), kRef, test::two_gpu_node()));
}

TEST(DraClaimReader, ALyingApiServerAnswerIsRefused) {
  auto other_uid = read_claim_allocation(allocated_claim("uid-2", {{}}), kRef, test::two_gpu_node());
  ASSERT_FALSE(other_uid);
  EXPECT_NE(other_uid.error().find("uid"), std::string::npos);
  auto unallocated = allocated_claim("uid-1", {{}});
  unallocated["status"].erase("allocation");
  EXPECT_FALSE(read_claim_allocation(unallocated, kRef, test::two_gpu_node()));
  EXPECT_FALSE(read_claim_allocation(nlohmann::json::array(), kRef, test::two_gpu_node()));
  EXPECT_FALSE(read_claim_allocation(nlohmann::json("claim"), kRef, test::two_gpu_node()));
}

TEST(DraClaimReader, OtherDriversDevicesAreNotOurs) {
  test::Result theirs;
  theirs.driver = "gpu.nvidia.com";
  theirs.pool = "node-b";
  auto a = read_claim_allocation(allocated_claim("uid-1", {theirs, {}}), kRef, test::two_gpu_node());
  ASSERT_TRUE(a) << a.error();
  EXPECT_EQ(a->devices.size(), 1u);
  EXPECT_FALSE(read_claim_allocation(allocated_claim("uid-1", {theirs}), kRef, test::two_gpu_node()));
}

TEST(DraClaimReader, ATestClaimIsValidAgainstTheResourceV1Schema) {
  if (!test::have_models()) GTEST_SKIP() << "no Kubernetes API models: run scripts/chart/install-tools.sh";
  EXPECT_EQ(test::schema_errors(allocated_claim("uid-1", {{}}, slice_config({{"priority", "high"}}))), "");
}

// The claim's allocation with a DeviceClass configuration first and the claim's own after it, as
// the API server lists them.
nlohmann::json claim_with_class_and_own(const nlohmann::json& from_class, const nlohmann::json& from_claim) {
  auto claim = allocated_claim("uid-1", {{}});
  auto configs = nlohmann::json::array(
      {{{"source", "FromClass"},
        {"opaque", {{"driver", "gpuslice.io"}, {"parameters", slice_config(from_class)}}}}});
  if (!from_claim.is_null()) {
    configs.push_back({{"source", "FromClaim"},
                       {"opaque", {{"driver", "gpuslice.io"}, {"parameters", slice_config(from_claim)}}}});
  }
  claim["status"]["allocation"]["devices"]["config"] = configs;
  return claim;
}

// Issue 45: a claim config without `priority` replaced a DeviceClass config that named one. Fields
// now merge one by one, and the class's level is the claim's default and its ceiling.
TEST(DraClaimReader, AClaimsConfigCannotDropOrRaiseTheLevelItsClassSets) {
  const nlohmann::json low_class = {{"priority", "low"}, {"memory", {{"limit", "2Gi"}}}};
  auto silent = read_claim_allocation(claim_with_class_and_own(low_class, {{"compute", {{"limit", 20}}}}),
                                      kRef, test::two_gpu_node());
  ASSERT_TRUE(silent) << silent.error();
  ASSERT_TRUE(silent->priority);
  EXPECT_EQ(*silent->priority, config::Priority::Low) << "the class's level is the default";
  EXPECT_EQ(silent->devices[0].memory_bytes, 2ULL << 30) << "the class's memory limit is kept";
  EXPECT_EQ(*silent->devices[0].compute, 20u) << "the claim's own field applies";

  auto raised = read_claim_allocation(claim_with_class_and_own(low_class, {{"priority", "normal"}}), kRef,
                                      test::two_gpu_node());
  ASSERT_TRUE(raised) << raised.error();
  ASSERT_TRUE(raised->priority);
  EXPECT_EQ(*raised->priority, config::Priority::Low) << "the class's level is a ceiling";

  auto lowered = read_claim_allocation(
      claim_with_class_and_own({{"priority", "normal"}}, {{"priority", "low"}}), kRef, test::two_gpu_node());
  ASSERT_TRUE(lowered) << lowered.error();
  ASSERT_TRUE(lowered->priority);
  EXPECT_EQ(*lowered->priority, config::Priority::Low) << "a claim may ask for less";
}

}  // namespace
}  // namespace gpuslice::node::dra
