#include <gtest/gtest.h>

#include "dra_test_util.h"
#include "node/dra/resource_slice.h"

namespace gpuslice::node::dra {
namespace {

SliceOptions options() {
  SliceOptions o;
  o.node_name = "node-a";
  return o;
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

}  // namespace
}  // namespace gpuslice::node::dra
