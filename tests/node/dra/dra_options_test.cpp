#include <gtest/gtest.h>

#include <map>

#include "node/dra_mode.h"
#include "node/startup/run_mode.h"

namespace gpuslice::node {
namespace {

auto env_of(std::map<std::string, std::string> values) {
  return [values = std::move(values)](const char* name) -> const char* {
    auto it = values.find(name);
    return it == values.end() ? nullptr : it->second.c_str();
  };
}

TEST(DraOptions, DefaultsComeFromTheTableAndThePodsEnvironment) {
  DraModeOptions o;
  auto parsed = parse_dra_options(
      {}, env_of({{"NODE_NAME", "gpu-node-7"}, {"POD_NAMESPACE", "gs"}, {"POD_NAME", "p"}}), o);
  ASSERT_EQ(parsed.message, "");
  EXPECT_EQ(o.node_name, "gpu-node-7");
  EXPECT_EQ(o.driver, "gpuslice.io");
  EXPECT_EQ(o.plugins_dir, "/var/lib/kubelet/plugins");
  EXPECT_EQ(o.registry_dir, "/var/lib/kubelet/plugins_registry");
  EXPECT_EQ(o.cdi_dir, "/var/run/cdi");
  EXPECT_EQ(o.lease_namespace, "gs");
  EXPECT_EQ(o.identity, "p");
  EXPECT_EQ(o.lease_duration, std::chrono::seconds(15));
  EXPECT_EQ(o.api_timeout, std::chrono::seconds(10));
  EXPECT_TRUE(o.publish);
  EXPECT_TRUE(o.partitionable);
  EXPECT_TRUE(o.priority_high_namespaces.empty()) << "no namespace may ask for high unless named";
}

TEST(DraOptions, HighPriorityNamespacesAndPartitionsAreTheOperatorsToSet) {
  DraModeOptions o;
  auto parsed = parse_dra_options({"--node-name=n1", "--no-partitionable-devices"},
                                  env_of({{"GPUSLICE_DRA_PRIORITY_HIGH_NAMESPACES", "ops,serving"}}), o);
  ASSERT_EQ(parsed.message, "");
  EXPECT_FALSE(o.partitionable);
  EXPECT_EQ(o.priority_high_namespaces, (std::vector<std::string>{"ops", "serving"}));
  DraModeOptions flag;
  ASSERT_EQ(parse_dra_options({"--node-name=n1", "--priority-high-namespaces=ops"},
                              env_of({{"GPUSLICE_DRA_PRIORITY_HIGH_NAMESPACES", "serving"}}), flag)
                .message,
            "");
  EXPECT_EQ(flag.priority_high_namespaces, std::vector<std::string>{"ops"});
  DraModeOptions bad;
  auto refused = parse_dra_options({"--node-name=n1", "--priority-high-namespaces=Team_A"}, env_of({}), bad);
  EXPECT_NE(refused.message.find("--priority-high-namespaces"), std::string::npos) << refused.message;
  EXPECT_NE(refused.message.find("not a namespace name"), std::string::npos) << refused.message;
}

TEST(DraOptions, TheNodeNameIsRequired) {
  DraModeOptions o;
  auto parsed = parse_dra_options({}, env_of({}), o);
  EXPECT_NE(parsed.message.find("--node-name"), std::string::npos);
}

TEST(DraOptions, FlagsWinAndBadValuesNameTheFlag) {
  DraModeOptions o;
  auto parsed = parse_dra_options({"--node-name=n1", "--driver-name", "gpu.example.com", "--no-publish",
                                   "--api-server=https://10.0.0.1:6443", "--lease-duration=30s"},
                                  env_of({{"NODE_NAME", "other"}}), o);
  ASSERT_EQ(parsed.message, "");
  EXPECT_EQ(o.node_name, "n1");
  EXPECT_EQ(o.driver, "gpu.example.com");
  EXPECT_FALSE(o.publish);
  EXPECT_EQ(o.api_server, "https://10.0.0.1:6443");
  EXPECT_EQ(o.lease_duration, std::chrono::seconds(30));
  DraModeOptions bad;
  auto refused = parse_dra_options({"--node-name=n1", "--api-timeout=soon"}, env_of({}), bad);
  EXPECT_NE(refused.message.find("--api-timeout"), std::string::npos);
  DraModeOptions help;
  auto usage = parse_dra_options({"--help"}, env_of({}), help);
  EXPECT_TRUE(usage.help);
  EXPECT_NE(usage.message.find("--registry-dir"), std::string::npos);
  EXPECT_NE(usage_main().find("dra"), std::string::npos);
}

}  // namespace
}  // namespace gpuslice::node
