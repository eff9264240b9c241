// Per-device values: the three forms, lookup order and the precedence / cap merges.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "../test_units.h"
#include "config/settings.h"

namespace gpuslice::config {
namespace {

using test_units::kGi;
const char* const kUuid0 = "GPU-3430f778-7a25-704c-9090-8b0bb2478114";
const char* const kUuid1 = "gpu-00000000-1111-2222-3333-444444444444";

DeviceValues parse_ok(const std::string& text, ValueKind kind = ValueKind::Size,
                      SizeDialect dialect = SizeDialect::Native) {
  auto r = parse_device_values(text, kind, dialect);
  EXPECT_TRUE(r.ok()) << text << ": " << r.error();
  return r.ok() ? *r : DeviceValues{};
}

std::string parse_error(const std::string& text, ValueKind kind = ValueKind::Size,
                        SizeDialect dialect = SizeDialect::Native) {
  auto r = parse_device_values(text, kind, dialect);
  EXPECT_FALSE(r.ok()) << text;
  return r.ok() ? std::string() : r.error();
}

TEST(DeviceValues, OneValueForEveryDevice) {
  DeviceValues v = parse_ok(" 8Gi ");
  EXPECT_EQ(v.all, 8 * kGi);
  EXPECT_TRUE(v.by_index.empty());
  EXPECT_EQ(v.lookup(0, kUuid0), 8 * kGi);
  EXPECT_EQ(v.lookup(7, ""), 8 * kGi);
}

TEST(DeviceValues, ListByIndex) {
  DeviceValues v = parse_ok("0=8Gi,1=4Gi");
  EXPECT_FALSE(v.all);
  EXPECT_EQ(v.lookup(0, ""), 8 * kGi);
  EXPECT_EQ(v.lookup(1, kUuid1), 4 * kGi);
  EXPECT_EQ(v.lookup(2, ""), std::nullopt);
  EXPECT_EQ(parse_ok(" 0 = 8Gi , 3=1Gi ").lookup(3, ""), kGi);
}

TEST(DeviceValues, ListAcceptsUuidKeys) {
  DeviceValues v = parse_ok(std::string(kUuid0) + "=2Gi,1=3Gi");
  ASSERT_EQ(v.by_uuid.size(), 1u);
  EXPECT_EQ(v.by_uuid[0].first, "gpu-3430f778-7a25-704c-9090-8b0bb2478114");
  EXPECT_EQ(v.lookup(5, "gpu-3430F778-7A25-704C-9090-8B0BB2478114"), 2 * kGi);
}

TEST(DeviceValues, ListErrors) {
  EXPECT_NE(parse_error("0=8Gi,").find("empty entry"), std::string::npos);
  EXPECT_NE(parse_error(",0=8Gi").find("empty entry"), std::string::npos);
  EXPECT_NE(parse_error("0=8Gi,,1=1Gi").find("empty entry"), std::string::npos);
  EXPECT_NE(parse_error("0=8Gi,4Gi").find("not DEVICE=VALUE"), std::string::npos);
  EXPECT_NE(parse_error("0=8Gi,1=4Xi").find("device '1': unknown unit 'Xi'"), std::string::npos);
  EXPECT_NE(parse_error("0=8Gi,0=4Gi").find("given twice"), std::string::npos);
  EXPECT_NE(parse_error("0=").find("device '0': empty value"), std::string::npos);
  EXPECT_NE(parse_error("=8Gi").find("neither a device index"), std::string::npos);
  EXPECT_NE(parse_error("01=8Gi").find("leading zeros"), std::string::npos);
  EXPECT_NE(parse_error("1024=8Gi").find("larger than 1023"), std::string::npos);
  EXPECT_NE(parse_error("99999999999=8Gi").find("larger than 1023"), std::string::npos);
  EXPECT_NE(parse_error("-1=8Gi").find("neither a device index"), std::string::npos);
  EXPECT_NE(parse_error("gpu0=8Gi").find("neither a device index"), std::string::npos);
  EXPECT_NE(parse_error("GPU-=8Gi").find("malformed GPU UUID"), std::string::npos);
  EXPECT_NE(parse_error("GPU-a b=8Gi").find("malformed GPU UUID"), std::string::npos);
  parse_error("0=8Gi=1");
  parse_error("0=-8Gi");
  parse_error("0=0");
}

TEST(DeviceValues, DuplicateUuidsDifferingOnlyInCase) {
  EXPECT_NE(parse_error("GPU-ABC=1Gi,gpu-abc=2Gi").find("given twice"), std::string::npos);
  EXPECT_NE(parse_error(R"({"GPU-ABC": 1, "gpu-abc": 2})").find("given twice"), std::string::npos);
}

TEST(DeviceValues, JsonByIndexAndUuid) {
  DeviceValues v = parse_ok(std::string(R"({"0": "8Gi", ")") + kUuid1 + R"(": 4294967296})");
  EXPECT_EQ(v.lookup(0, ""), 8 * kGi);
  EXPECT_EQ(v.lookup(1, "GPU-00000000-1111-2222-3333-444444444444"), 4 * kGi);
  EXPECT_EQ(v.lookup(2, ""), std::nullopt);
}

TEST(DeviceValues, JsonNumbersAreBytesAndStringsUseTheDialect) {
  EXPECT_EQ(parse_ok(R"({"0": 1024})").lookup(0, ""), 1024u);
  EXPECT_EQ(parse_ok(R"({"0": "1g"})", ValueKind::Size, SizeDialect::Hami).lookup(0, ""), kGi);
  EXPECT_EQ(parse_ok(R"({"0": "1g"})").lookup(0, ""), 1000000000u);
  EXPECT_NE(parse_error(R"({"0": 1.5})").find("not a whole number"), std::string::npos);
  EXPECT_NE(parse_error(R"({"0": 1e9})").find("not a whole number"), std::string::npos);
  EXPECT_NE(parse_error(R"({"0": -1})").find("negative"), std::string::npos);
  EXPECT_NE(parse_error(R"({"0": 0})").find("greater than 0"), std::string::npos);
  EXPECT_NE(parse_error(R"({"0": 18446744073709551616})").find("larger than"), std::string::npos);
  EXPECT_NE(parse_error(R"({"0": 1e999999})").find("not a whole number"), std::string::npos);
}

TEST(DeviceValues, JsonOnlyEntryPoint) {
  auto r = parse_json_device_values(R"({"0": 30, "1": "50"})", ValueKind::Percent, SizeDialect::Bytes);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->lookup(0, ""), 30u);
  EXPECT_EQ(r->lookup(1, ""), 50u);
  EXPECT_FALSE(parse_json_device_values("30", ValueKind::Percent, SizeDialect::Bytes).ok());
  EXPECT_FALSE(parse_json_device_values("0=30", ValueKind::Percent, SizeDialect::Bytes).ok());
  auto bytes_only = parse_json_device_values(R"({"0": "4Gi"})", ValueKind::Size, SizeDialect::Bytes);
  ASSERT_FALSE(bytes_only.ok());
  EXPECT_NE(bytes_only.error().find("device '0'"), std::string::npos);
  auto empty = parse_json_device_values(" {} ", ValueKind::Size, SizeDialect::Bytes);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(DeviceValues, JsonErrorsPropagate) {
  EXPECT_NE(parse_error(R"({"0": "8Gi",})").find("trailing comma"), std::string::npos);
  EXPECT_NE(parse_error(R"({"0": {"1": 2}})").find("nested"), std::string::npos);
  EXPECT_NE(parse_error(R"({"0": 1, "0": 2})").find("duplicate key"), std::string::npos);
  EXPECT_NE(parse_error(R"({"zero": 1})").find("neither a device index"), std::string::npos);
  EXPECT_NE(parse_error(R"({"0": "8Gi")").find("unterminated"), std::string::npos);
}

TEST(DeviceValues, PercentForms) {
  EXPECT_EQ(parse_ok("30", ValueKind::Percent).all, 30u);
  DeviceValues v = parse_ok("0=30,1=50", ValueKind::Percent);
  EXPECT_EQ(v.lookup(1, ""), 50u);
  EXPECT_EQ(parse_ok(R"({"0": 100})", ValueKind::Percent).lookup(0, ""), 100u);
  parse_error("0", ValueKind::Percent);
  parse_error("0=101", ValueKind::Percent);
  parse_error(R"({"0": 30.5})", ValueKind::Percent);
  parse_error(R"({"0": "0"})", ValueKind::Percent);
  parse_error("30%", ValueKind::Percent);
}

TEST(DeviceValues, LimitsOnSize) {
  EXPECT_NE(parse_error(std::string(70000, ' ') + "8Gi").find("longer than 65536"), std::string::npos);
  std::string many;
  for (int i = 0; i < 257; ++i) many += (i ? "," : "") + std::to_string(i) + "=1Gi";
  EXPECT_NE(parse_error(many).find("more than 256"), std::string::npos);
}

TEST(DeviceValues, LookupOrderUuidThenIndexThenAll) {
  DeviceValues v;
  v.all = 1;
  v.by_index = {{0, 2}};
  v.by_uuid = {{"gpu-a", 3}};
  EXPECT_EQ(v.lookup(0, "GPU-A"), 3u);
  EXPECT_EQ(v.lookup(0, "gpu-b"), 2u);
  EXPECT_EQ(v.lookup(1, "gpu-b"), 1u);
  EXPECT_EQ(v.lookup(-1, ""), 1u);
  EXPECT_EQ(v.lookup(-1, "gpu-a"), 3u);
  EXPECT_EQ(DeviceValues{}.lookup(0, "gpu-a"), std::nullopt);
}

TEST(Merge, PrecedenceFoldsIntoOneTableWhenExact) {
  DeviceValues high = parse_ok("0=8Gi");
  DeviceValues low = parse_ok("0=1Gi,1=2Gi");
  DeviceValues merged = merge_by_precedence(high, low);
  EXPECT_TRUE(merged.fallbacks.empty());
  EXPECT_EQ(merged.lookup(0, ""), 8 * kGi);
  EXPECT_EQ(merged.lookup(1, ""), 2 * kGi);

  DeviceValues all_low;
  all_low.all = 3;
  merged = merge_by_precedence(parse_ok("1=5"), all_low);
  EXPECT_TRUE(merged.fallbacks.empty());
  EXPECT_EQ(merged.lookup(1, ""), 5u);
  EXPECT_EQ(merged.lookup(0, ""), 3u);
}

TEST(Merge, HigherValueForEveryDeviceHidesLower) {
  DeviceValues merged = merge_by_precedence(parse_ok("8Gi"), parse_ok("0=1Gi"));
  EXPECT_TRUE(merged.by_index.empty());
  EXPECT_EQ(merged.lookup(0, ""), 8 * kGi);
}

TEST(Merge, IndexAboveUuidStaysExact) {
  // Device 0 is kUuid0: the higher source names it by index, the lower by UUID.
  DeviceValues merged =
      merge_by_precedence(parse_ok("0=8Gi"), parse_ok(std::string(kUuid0) + "=1Gi," + kUuid1 + "=2Gi"));
  EXPECT_EQ(merged.lookup(0, kUuid0), 8 * kGi);
  EXPECT_EQ(merged.lookup(1, kUuid1), 2 * kGi);
  EXPECT_EQ(merged.lookup(2, "gpu-other"), std::nullopt);
}

// Random sources over a small universe of devices, checked against the definition of the merge.
class MergeProperty : public ::testing::Test {
 protected:
  struct Device {
    int index;
    std::string uuid;
  };

  DeviceValues random_values() {
    DeviceValues v;
    if (coin(4)) v.all = value();
    for (int i = 0; i < 3; ++i) {
      if (coin(3)) v.by_index.emplace_back(i, value());
    }
    for (const char* uuid : {"gpu-a", "gpu-b", "gpu-c"}) {
      if (coin(3)) v.by_uuid.emplace_back(uuid, value());
    }
    return v;
  }
  bool coin(int one_in) { return std::uniform_int_distribution<int>(0, one_in - 1)(rng_) == 0; }
  std::uint64_t value() { return std::uniform_int_distribution<std::uint64_t>(1, 50)(rng_); }

  std::mt19937_64 rng_{12345};
  // Device k has index k and UUID gpu-<letter>; plus devices the sources may know only one way.
  const std::vector<Device> devices_ = {{0, "GPU-A"}, {1, "gpu-b"},  {2, "gpu-c"}, {0, "gpu-z"},
                                        {7, "gpu-b"}, {-1, "gpu-a"}, {2, ""},      {9, "gpu-q"}};
};

TEST_F(MergeProperty, PrecedenceChainMatchesDefinition) {
  for (int round = 0; round < 500; ++round) {
    std::vector<DeviceValues> sources;
    const int count = 1 + static_cast<int>(rng_() % 4);
    for (int i = 0; i < count; ++i) sources.push_back(random_values());
    DeviceValues merged = sources[0];
    for (int i = 1; i < count; ++i) merged = merge_by_precedence(merged, sources[i]);
    for (const Device& d : devices_) {
      std::optional<std::uint64_t> expected;
      for (const DeviceValues& s : sources) {
        if ((expected = s.lookup(d.index, d.uuid))) break;
      }
      ASSERT_EQ(merged.lookup(d.index, d.uuid), expected)
          << "round " << round << " device " << d.index << d.uuid;
    }
  }
}

TEST(Merge, EmptyReportsNestedValues) {
  DeviceValues v;
  EXPECT_TRUE(v.empty());
  v.fallbacks.push_back(parse_ok("1Gi"));
  EXPECT_FALSE(v.empty());
}

}  // namespace
}  // namespace gpuslice::config
