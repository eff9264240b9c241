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
