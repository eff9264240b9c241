#include <gtest/gtest.h>

#include "dra_test_util.h"
#include "node/dra/resource_slice.h"

namespace gpuslice::node::dra {
namespace {

SliceOptions options(bool partitionable = false) {
  SliceOptions o;
  o.node_name = "node-a";
  o.partitionable = partitionable;
  return o;
}

nlohmann::json build_resource_slice(const std::vector<GpuInfo>& gpus, const SliceOptions& o) {
  auto slices = build_resource_slices(gpus, o);
  EXPECT_EQ(slices.size(), 1u);
  return slices.front();
}

const nlohmann::json* device(const nlohmann::json& slice, const std::string& name) {
  for (const auto& d : slice["spec"]["devices"])
    if (d["name"] == name) return &d;
  return nullptr;
}

TEST(DraResourceSlice, OneSharedDevicePerGpuWithMemoryAndComputeCapacities) {
  auto node = test::two_gpu_node();
  auto slice = build_resource_slice(node.gpus, options());
  EXPECT_EQ(slice["metadata"]["name"], "node-a-gpuslice-io");
  const auto& spec = slice["spec"];
  EXPECT_EQ(spec["driver"], "gpuslice.io");
  EXPECT_EQ(spec["nodeName"], "node-a");
  EXPECT_EQ(spec["pool"]["name"], "node-a");
  EXPECT_EQ(spec["pool"]["resourceSliceCount"], 1);
  ASSERT_EQ(spec["devices"].size(), 2u);
  const auto& d = spec["devices"][1];
  EXPECT_EQ(d["name"], "gpu-1");
  EXPECT_EQ(d["allowMultipleAllocations"], true);
  EXPECT_EQ(d["attributes"]["uuid"]["string"], node.gpus[1].uuid);
  EXPECT_EQ(d["attributes"]["productName"]["string"], "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(d["attributes"]["driverVersion"]["version"], "580.159.4");
  EXPECT_EQ(d["attributes"]["cudaComputeCapability"]["version"], "9.0.0");
  EXPECT_EQ(d["attributes"]["enforcement"]["string"], "memory,compute");
  EXPECT_EQ(d["capacity"]["memory"]["value"], std::to_string(80ULL << 30));
  // A claim that names no capacity gets the whole GPU, so whole and fractional claims exclude each other.
  EXPECT_EQ(d["capacity"]["memory"]["requestPolicy"]["default"], std::to_string(80ULL << 30));
  EXPECT_EQ(d["capacity"]["memory"]["requestPolicy"]["validRange"]["step"], "1048576");
  EXPECT_EQ(d["capacity"]["compute"]["value"], "100");
  EXPECT_EQ(d["capacity"]["compute"]["requestPolicy"]["default"], "100");
  EXPECT_EQ(d["capacity"]["compute"]["requestPolicy"]["validRange"]["max"], "100");
}

TEST(DraResourceSlice, MemoryIsPublishedInWholeMebibytes) {
  GpuInfo g;
  g.memory_total_bytes = (80ULL << 30) + 12345;
  EXPECT_EQ(published_memory(g), 80ULL << 30);
}

TEST(DraResourceSlice, VersionsBecomeSemanticVersions) {
  EXPECT_EQ(*semantic_version("580.159.04"), "580.159.4");
  EXPECT_EQ(*semantic_version("9.0"), "9.0.0");
  EXPECT_FALSE(semantic_version(""));
  EXPECT_FALSE(semantic_version("1.2.3.4"));
  EXPECT_FALSE(semantic_version("5x"));
}

TEST(DraResourceSlice, AnUnhealthyGpuIsTaintedNotDropped) {
  auto node = test::two_gpu_node();
  node.gpus[0].healthy = false;
  auto slice = build_resource_slice(node.gpus, options());
  ASSERT_EQ(slice["spec"]["devices"].size(), 2u);
  EXPECT_EQ(slice["spec"]["devices"][0]["taints"][0]["effect"], "NoSchedule");
  EXPECT_FALSE(slice["spec"]["devices"][1].contains("taints"));
}

TEST(DraResourceSlice, ValidAgainstTheResourceV1Schema) {
  if (!test::have_models()) GTEST_SKIP() << "no Kubernetes API models: run scripts/chart/install-tools.sh";
  auto node = test::two_gpu_node();
  node.gpus[1].healthy = false;
  node.gpus[1].driver_version.clear();
  EXPECT_EQ(test::schema_errors(build_resource_slice(node.gpus, options())), "");
  // The validator itself refuses what the API server refuses.
  auto bad = build_resource_slice(node.gpus, options());
  bad["spec"]["devices"][0]["capacity"]["memory"]["requestPolicy"]["validRange"]["stride"] = "1";
  EXPECT_NE(test::schema_errors(bad), "");
}

TEST(DraResourceSlice, PartitionsAddAWholeDevicePerGpuAndACounterSliceBothConsumeFully) {
  auto node = test::two_gpu_node();
  auto slices = build_resource_slices(node.gpus, options(true));
  ASSERT_EQ(slices.size(), 2u);
  const auto& devices = slices[0];
  const auto& counters = slices[1];
  EXPECT_EQ(devices["metadata"]["name"], "node-a-gpuslice-io");
  EXPECT_EQ(counters["metadata"]["name"], "node-a-gpuslice-io-counters-0");
  for (const auto& s : slices) {
    EXPECT_EQ(s["spec"]["pool"]["resourceSliceCount"], 2);
    EXPECT_EQ(s["spec"]["pool"]["name"], "node-a");
    EXPECT_EQ(s["spec"]["nodeName"], "node-a");
    EXPECT_EQ(test::slice_rule_errors(s), "");
  }
  EXPECT_FALSE(devices["spec"].contains("sharedCounters"));
  EXPECT_FALSE(counters["spec"].contains("devices"));
  ASSERT_EQ(devices["spec"]["devices"].size(), 4u);
  const std::string memory = std::to_string(80ULL << 30);
  const nlohmann::json all = {{"memory", {{"value", memory}}}, {"compute", {{"value", "100"}}}};
  ASSERT_EQ(counters["spec"]["sharedCounters"].size(), 2u);
  EXPECT_EQ(counters["spec"]["sharedCounters"][1]["name"], "gpu-1");
  EXPECT_EQ(counters["spec"]["sharedCounters"][1]["counters"], all);
  const auto* shared = device(devices, "gpu-1");
  const auto* whole = device(devices, "gpu-1-whole");
  ASSERT_TRUE(shared && whole);
  EXPECT_EQ((*shared)["allowMultipleAllocations"], true);
  EXPECT_FALSE(whole->contains("allowMultipleAllocations"));
  EXPECT_EQ((*shared)["attributes"]["wholeGpu"]["bool"], false);
  EXPECT_EQ((*whole)["attributes"]["wholeGpu"]["bool"], true);
  EXPECT_EQ((*whole)["attributes"]["uuid"], (*shared)["attributes"]["uuid"]);
  EXPECT_FALSE((*whole)["capacity"]["memory"].contains("requestPolicy")) << "one claim takes all of it";
  for (const auto* d : {shared, whole}) {
    ASSERT_EQ((*d)["consumesCounters"].size(), 1u);
    EXPECT_EQ((*d)["consumesCounters"][0]["counterSet"], "gpu-1");
    EXPECT_EQ((*d)["consumesCounters"][0]["counters"], all);
  }
}

// Under the scheduler's counting (test::overdrawn_counter: a shared device consumes its counters
// once while it holds any share), the whole device and any share of the same GPU overdraw the GPU's
// counter set; everything else fits.
TEST(DraResourceSlice, CountersMakeTheWholeDeviceAndSharesOfTheSameGpuMutuallyExclusive) {
  auto slices = build_resource_slices(test::two_gpu_node().gpus, options(true));
  EXPECT_EQ(test::overdrawn_counter(slices, {"gpu-0-whole"}), "");
  EXPECT_EQ(test::overdrawn_counter(slices, {"gpu-0", "gpu-0", "gpu-0"}), "") << "shares never overdraw";
  EXPECT_EQ(test::overdrawn_counter(slices, {"gpu-0-whole", "gpu-1", "gpu-1"}), "");
  EXPECT_EQ(test::overdrawn_counter(slices, {"gpu-0-whole", "gpu-1-whole"}), "");
  EXPECT_EQ(test::overdrawn_counter(slices, {"gpu-0", "gpu-0-whole"}), "gpu-0/compute");
  EXPECT_EQ(test::overdrawn_counter(slices, {"gpu-1-whole", "gpu-1", "gpu-0"}), "gpu-1/compute");
  EXPECT_EQ(test::overdrawn_counter(slices, {"gpu-1-whole", "gpu-1-whole"}), "gpu-1-whole allocated twice");
  // Without partitions the whole devices do not exist: nothing to keep apart.
  auto plain = build_resource_slice(test::two_gpu_node().gpus, options(false));
  EXPECT_EQ(plain["spec"]["devices"].size(), 2u);
  EXPECT_EQ(plain["spec"]["pool"]["resourceSliceCount"], 1);
  EXPECT_FALSE(plain["spec"]["devices"][0].contains("consumesCounters"));
}

TEST(DraResourceSlice, ManyGpusSpreadCounterSetsOverSlicesWithinTheApisBounds) {
  std::vector<GpuInfo> gpus;
  for (unsigned i = 0; i < 20; ++i) {
    GpuInfo g;
    g.index = i;
    g.uuid = "GPU-" + std::to_string(i);
    g.memory_total_bytes = 16ULL << 30;
    gpus.push_back(g);
  }
  auto slices = build_resource_slices(gpus, options(true));
  ASSERT_EQ(slices.size(), 4u);  // 40 devices, then 8 + 8 + 4 counter sets
  EXPECT_EQ(slices[3]["spec"]["sharedCounters"].size(), 4u);
  for (const auto& s : slices) {
    EXPECT_EQ(s["spec"]["pool"]["resourceSliceCount"], 4);
    EXPECT_EQ(test::slice_rule_errors(s), "");
  }
  std::vector<std::string> every_whole;
  for (const auto& g : gpus) every_whole.push_back("gpu-" + std::to_string(g.index) + "-whole");
  EXPECT_EQ(test::overdrawn_counter(slices, every_whole), "");
  // Past 32 GPUs the devices would not fit one slice: shared devices only, as without partitions.
  for (unsigned i = 20; i < 33; ++i) {
    gpus.push_back(gpus[0]);
    gpus.back().index = i;
  }
  auto many = build_resource_slices(gpus, options(true));
  ASSERT_EQ(many.size(), 1u);
  EXPECT_EQ(many[0]["spec"]["devices"].size(), 33u);
  EXPECT_EQ(test::slice_rule_errors(many[0]), "");
}

TEST(DraResourceSlice, PartitionedSlicesAreValidAgainstTheResourceV1Schema) {
  if (!test::have_models()) GTEST_SKIP() << "no Kubernetes API models: run scripts/chart/install-tools.sh";
  auto node = test::two_gpu_node();
  node.gpus[1].healthy = false;
  for (const auto& s : build_resource_slices(node.gpus, options(true))) {
    SCOPED_TRACE(s["metadata"]["name"].get<std::string>());
    EXPECT_EQ(test::schema_errors(s), "");
  }
  // The validator refuses a misspelt partition field as the API server would.
  auto bad = build_resource_slices(node.gpus, options(true));
  bad[0]["spec"]["devices"][1]["consumesCounters"][0]["counterSets"] = "gpu-0";
  EXPECT_NE(test::schema_errors(bad[0]), "");
}

}  // namespace
}  // namespace gpuslice::node::dra
