#include "config/priority.h"

#include <gtest/gtest.h>

#include <string_view>

#include "config/settings.h"

namespace gpuslice::config {
namespace {

TEST(ParsePriority, AcceptsTheThreeLevelsInAnyCaseWithBlanks) {
  EXPECT_EQ(*parse_priority("high"), Priority::High);
  EXPECT_EQ(*parse_priority(" Normal\n"), Priority::Normal);
  EXPECT_EQ(*parse_priority("LOW"), Priority::Low);
}

TEST(ParsePriority, RejectsEverythingElseNamingTheAcceptedValues) {
  for (const char* bad : {"", "hi", "highest", "1", "2", "high,low", "lo w", "high\x01"}) {
    const auto parsed = parse_priority(bad);
    EXPECT_FALSE(parsed.ok()) << bad;
    EXPECT_NE(parsed.error().find("high, normal or low"), std::string::npos) << bad;
  }
}

TEST(ParseDuration, AcceptsWholeNumbersWithAUnitWithinTheRange) {
  EXPECT_EQ(*parse_duration_ns("500us", 0, 10'000'000), 500'000U);
  EXPECT_EQ(*parse_duration_ns(" 2ms\n", 0, 10'000'000), 2'000'000U);
  EXPECT_EQ(*parse_duration_ns("0ns", 0, 10'000'000), 0U);
  EXPECT_EQ(*parse_duration_ns("1s", 0, 1'000'000'000), 1'000'000'000U);
}

TEST(ParseDuration, RejectsMissingUnitsFractionsSignsOverflowAndOutOfRangeNamingTheRange) {
  for (const char* bad : {"", "2", "ms", "1.5ms", "-1ms", "2 ms extra", "2MS", "20ms",
                          "99999999999999999999s", "18446744073709551615s", "50us"}) {
    const auto parsed = parse_duration_ns(bad, 100'000, 10'000'000);
    EXPECT_FALSE(parsed.ok()) << bad;
    if (!parsed.ok()) {
      EXPECT_NE(parsed.error().find("100us to 10000us"), std::string::npos) << bad << parsed.error();
    }
  }
}

TEST(ParsePriority, NamesRoundTrip) {
  for (const Priority p : {Priority::Low, Priority::Normal, Priority::High}) {
    EXPECT_EQ(*parse_priority(priority_name(p)), p);
  }
}

}  // namespace
}  // namespace gpuslice::config

namespace gpuslice::config {
namespace {

Settings load_with(const char* priority) {
  return load_settings([priority](const char* name) -> const char* {
    return std::string_view(name) == "GPUSLICE_PRIORITY" ? priority : nullptr;
  });
}

// Settings with only the variable `name` set, to `value` (nullptr: unset).
Settings load_one(std::string_view name, const char* value) {
  return load_settings([name, value](const char* n) -> const char* { return name == n ? value : nullptr; });
}

Settings load_tuning(const char* in_flight, const char* grace, const char* floor, const char* ramp = nullptr,
                     const char* cost = nullptr, const char* long_kernel = nullptr) {
  return load_settings([=](const char* name) -> const char* {
    const std::string_view n(name);
    if (n == "GPUSLICE_PRIORITY_COST") return cost;
    if (n == "GPUSLICE_PRIORITY_LONG_KERNEL") return long_kernel;
    if (n == "GPUSLICE_PRIORITY_IN_FLIGHT") return in_flight;
    if (n == "GPUSLICE_PRIORITY_RAMP") return ramp;
    if (n == "GPUSLICE_PRIORITY_GRACE") return grace;
    if (n == "GPUSLICE_PRIORITY_FLOOR") return floor;
    return nullptr;
  });
}

TEST(PriorityTunables, UnsetMeansTheDefaultsAndGivenValuesAreParsed) {
  const Settings none = load_tuning(nullptr, nullptr, nullptr);
  EXPECT_TRUE(none.ok());
  EXPECT_FALSE(none.priority_tuning.in_flight_ns || none.priority_tuning.grace_ns ||
               none.priority_tuning.floor_percent || none.priority_tuning.ramp_ns);
  const Settings s = load_tuning("1ms", "500us", "0", "8ms");
  ASSERT_TRUE(s.ok()) << s.errors[0];
  EXPECT_EQ(s.priority_tuning.in_flight_ns, 1'000'000U);
  EXPECT_EQ(s.priority_tuning.ramp_ns, 8'000'000U);
  EXPECT_EQ(load_tuning(nullptr, nullptr, nullptr, "0ms").priority_tuning.ramp_ns, 0U) << "0: no ramp";
  EXPECT_EQ(s.priority_tuning.grace_ns, 500'000U);
  EXPECT_EQ(s.priority_tuning.floor_percent, 0U);
  EXPECT_FALSE(none.priority_tuning.per_kernel_cost.has_value());
  EXPECT_EQ(load_tuning(nullptr, nullptr, nullptr, nullptr, "kernel").priority_tuning.per_kernel_cost, true);
  EXPECT_EQ(load_tuning(nullptr, nullptr, nullptr, nullptr, "average").priority_tuning.per_kernel_cost,
            false);
  EXPECT_FALSE(none.priority_tuning.long_kernels_alone.has_value());
  EXPECT_EQ(
      load_tuning(nullptr, nullptr, nullptr, nullptr, nullptr, "alone").priority_tuning.long_kernels_alone,
      true);
  EXPECT_EQ(
      load_tuning(nullptr, nullptr, nullptr, nullptr, nullptr, "queued").priority_tuning.long_kernels_alone,
      false);
}

// Each malformed tunable is one error naming the variable and its value (the library then fails
// closed), never a silent default.
TEST(PriorityTunables, MalformedOrOutOfRangeValuesFailClosedNamingTheVariable) {
  const Settings s = load_tuning("50us", "2", "101", "2s");
  ASSERT_EQ(s.errors.size(), 4U);
  EXPECT_NE(s.errors[0].find("GPUSLICE_PRIORITY_IN_FLIGHT='50us'"), std::string::npos) << s.errors[0];
  EXPECT_NE(s.errors[1].find("GPUSLICE_PRIORITY_RAMP='2s'"), std::string::npos) << s.errors[1];
  EXPECT_NE(s.errors[2].find("GPUSLICE_PRIORITY_GRACE='2'"), std::string::npos) << s.errors[2];
  EXPECT_NE(s.errors[3].find("GPUSLICE_PRIORITY_FLOOR='101'"), std::string::npos) << s.errors[3];
}

TEST(PriorityTunables, AnUnknownCostModelOrLongKernelRuleFailsClosedNamingTheVariable) {
  const Settings s = load_tuning(nullptr, nullptr, nullptr, nullptr, "Kernel");
  ASSERT_EQ(s.errors.size(), 1U);
  EXPECT_NE(s.errors[0].find("GPUSLICE_PRIORITY_COST='Kernel'"), std::string::npos) << s.errors[0];
  EXPECT_NE(s.errors[0].find("kernel or average"), std::string::npos) << s.errors[0];
  const Settings bad = load_tuning(nullptr, nullptr, nullptr, nullptr, nullptr, "yes");
  ASSERT_EQ(bad.errors.size(), 1U);
  EXPECT_NE(bad.errors[0].find("GPUSLICE_PRIORITY_LONG_KERNEL='yes'"), std::string::npos) << bad.errors[0];
  EXPECT_NE(bad.errors[0].find("alone or queued"), std::string::npos) << bad.errors[0];
}

TEST(PriorityTunables, TheLightShareIsAPercentageAndZeroMeansEveryHigherOneHolds) {
  const auto with = [](const char* value) { return load_one("GPUSLICE_PRIORITY_LIGHT_SHARE", value); };
  EXPECT_FALSE(with(nullptr).priority_tuning.light_share_percent.has_value());
  EXPECT_EQ(with("30").priority_tuning.light_share_percent, 30U);
  EXPECT_EQ(with("0").priority_tuning.light_share_percent, 0U);
  const Settings bad = with("150");
  ASSERT_EQ(bad.errors.size(), 1U);
  EXPECT_NE(bad.errors[0].find("GPUSLICE_PRIORITY_LIGHT_SHARE='150'"), std::string::npos) << bad.errors[0];
}

TEST(PriorityTunables, TheRequestShareIsAPercentageAndAnythingElseNamesTheVariable) {
  const auto with = [](const char* value) { return load_one("GPUSLICE_PRIORITY_REQUEST_SHARE", value); };
  EXPECT_FALSE(with(nullptr).priority_tuning.request_share_percent.has_value());
  EXPECT_EQ(with("10").priority_tuning.request_share_percent, 10U);
  EXPECT_EQ(with("0").priority_tuning.request_share_percent, 0U);
  EXPECT_FALSE(with("").priority_tuning.request_share_percent.has_value()) << "empty counts as unset";
  for (const char* bad_value : {"101", "5%x", "-1", "five"}) {
    const Settings bad = with(bad_value);
    ASSERT_EQ(bad.errors.size(), 1U) << bad_value;
    EXPECT_NE(bad.errors[0].find("GPUSLICE_PRIORITY_REQUEST_SHARE='"), std::string::npos) << bad.errors[0];
  }
}

TEST(PriorityTunables, TheRefreshIsADurationFrom20usTo10ms) {
  const auto with = [](const char* value) { return load_one("GPUSLICE_PRIORITY_REFRESH", value); };
  EXPECT_FALSE(with(nullptr).priority_tuning.refresh_ns.has_value());
  EXPECT_EQ(with("50us").priority_tuning.refresh_ns, 50'000U);
  EXPECT_EQ(with("10ms").priority_tuning.refresh_ns, 10'000'000U);
  for (const char* bad_value : {"10us", "11ms", "50", "fast"}) {
    const Settings bad = with(bad_value);
    ASSERT_EQ(bad.errors.size(), 1U) << bad_value;
    EXPECT_NE(bad.errors[0].find(std::string("GPUSLICE_PRIORITY_REFRESH='") + bad_value + "'"),
              std::string::npos)
        << bad.errors[0];
  }
}

TEST(PrioritySetting, IsUnsetByDefaultAndParsedWhenGiven) {
  EXPECT_FALSE(load_with(nullptr).priority.has_value());
  const Settings s = load_with("low");
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.priority, Priority::Low);
}

// A typo must not run the container at the default priority silently: one error naming the
// variable and the value, which makes the library fail closed.
TEST(PrioritySetting, MalformedValueFailsClosedNamingTheVariable) {
  const Settings s = load_with("urgent");
  ASSERT_EQ(s.errors.size(), 1U);
  EXPECT_NE(s.errors[0].find("GPUSLICE_PRIORITY='urgent'"), std::string::npos) << s.errors[0];
  EXPECT_FALSE(s.priority.has_value());
}

}  // namespace
}  // namespace gpuslice::config
