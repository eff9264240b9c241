#include <gtest/gtest.h>

#include "node/dra/claim_config.h"

namespace gpuslice::node::dra {
namespace {

std::string with(const std::string& fields) {
  return R"({"apiVersion":"gpuslice.io/v1alpha1","kind":"SliceConfig")" +
         (fields.empty() ? "" : "," + fields) + "}";
}

TEST(DraClaimConfig, ReadsEveryFieldIntoTypedValues) {
  auto c = parse_claim_config(with(
      R"("memory":{"request":"4Gi","limit":"8Gi"},"compute":{"request":20,"limit":"30%"},"priority":"high","onPressure":"fail")"));
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(*c->memory_request, 4ULL << 30);
  EXPECT_EQ(*c->memory_limit, 8ULL << 30);
  EXPECT_EQ(*c->compute_request, 20u);
  EXPECT_EQ(*c->compute_limit, 30u);
  EXPECT_EQ(*c->priority, config::Priority::High);
  EXPECT_EQ(c->on_pressure, PressurePolicy::Fail);
}

TEST(DraClaimConfig, EverythingIsOptionalButTheTypeMeta) {
  auto c = parse_claim_config(with(""));
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(*c, ClaimConfig{});
  auto bare = parse_claim_config("{}");
  ASSERT_FALSE(bare);
  EXPECT_NE(bare.error().find("apiVersion"), std::string::npos);
}

TEST(DraClaimConfig, ErrorsNameTheFieldAndTheValue) {
  struct Case {
    std::string fields, expect;
  } cases[] = {
      {R"("memory":{"limit":"8 GB"})", "memory.limit: \"8 GB\""},
      {R"("memory":{"limit":"-1Gi"})", "memory.limit"},
      {R"("memory":{"limit":0})", "memory.limit"},
      {R"("memory":{"request":"9Gi","limit":"8Gi"})", "memory: request is above limit"},
      {R"("memory":{"max":"8Gi"})", "memory.max: unknown field"},
      {R"("memory":"8Gi")", "memory: expected an object"},
      {R"("compute":{"limit":101})", "compute.limit: 101"},
      {R"("compute":{"limit":0})", "compute.limit: 0"},
      {R"("compute":{"limit":-5})", "compute.limit: -5"},
      {R"("compute":{"limit":30.5})", "compute.limit: 30.5"},
      {R"("priority":"urgent")", "priority: \"urgent\""},
      {R"("priority":2)", "priority: 2"},
      {R"("onPressure":"evict")", "onPressure: \"evict\""},
      {R"("memroy":{"limit":"8Gi"})", "memroy: unknown field"},
  };
  for (const auto& c : cases) {
    auto parsed = parse_claim_config(with(c.fields));
    ASSERT_FALSE(parsed) << c.fields;
    EXPECT_NE(parsed.error().find(c.expect), std::string::npos) << parsed.error();
  }
  auto kind = parse_claim_config(R"({"apiVersion":"gpuslice.io/v1alpha1","kind":"Other"})");
  ASSERT_FALSE(kind);
  EXPECT_NE(kind.error().find("kind: \"Other\""), std::string::npos);
}

TEST(DraClaimConfig, HostileDocumentsAreRefusedWithoutRecursion) {
  EXPECT_FALSE(parse_claim_config(std::string(100000, '[')));  // deeper than any config, and too big
  EXPECT_FALSE(parse_claim_config(std::string(20, '[') + std::string(20, ']')));
  auto dup = parse_claim_config(
      R"({"apiVersion":"gpuslice.io/v1alpha1","kind":"SliceConfig","priority":"low","priority":"high"})");
  ASSERT_FALSE(dup);
  EXPECT_NE(dup.error().find("duplicate key"), std::string::npos);
  auto big = parse_claim_config(with("\"x\":\"" + std::string(20000, 'a') + "\""));
  ASSERT_FALSE(big);
  EXPECT_NE(big.error().find("bytes"), std::string::npos);
  auto control = parse_claim_config(with(R"("priority":"\u001b[31mhigh")"));
  ASSERT_FALSE(control);
  EXPECT_EQ(control.error().find('\x1b'), std::string::npos) << "terminal escapes must be escaped";
}

}  // namespace
}  // namespace gpuslice::node::dra
