// scan_duration: the whole-number-and-unit scanner both duration parsers share. Each caller's own
// grammar and messages are tested with it (config/priority_test, node/options_test).
#include "common/duration_scan.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string_view>

namespace gpuslice::text {
namespace {

using Status = DurationScan::Status;

constexpr DurationUnit kUnits[] = {{"ns", 1}, {"us", 1'000}, {"ms", 1'000'000}, {"s", 1'000'000'000}};
constexpr DurationUnit kBareIsSeconds[] = {{"ms", 1}, {"s", 1000}, {"", 1000}, {"m", 60000}};

Status status_of(std::string_view text, Blanks blanks = Blanks::Skip) {
  return scan_duration(text, kUnits, blanks).status;
}

// The priority tunables always refused a number from 18446744073709551610 on as too large.
static_assert(kMaxDurationNumber == 18'446'744'073'709'551'609ULL);

TEST(ScanDuration, ReadsTheNumberAndScalesItByTheUnitOfTheTable) {
  EXPECT_EQ(scan_duration("7ns", kUnits, Blanks::Skip).value, 7U);
  EXPECT_EQ(scan_duration("500us", kUnits, Blanks::Skip).value, 500'000U);
  EXPECT_EQ(scan_duration("2ms", kUnits, Blanks::Skip).value, 2'000'000U);
  EXPECT_EQ(scan_duration("3s", kUnits, Blanks::Skip).value, 3'000'000'000U);
  EXPECT_EQ(scan_duration("0ms", kUnits, Blanks::Skip).value, 0U);
  const DurationScan scan = scan_duration("0042ms", kUnits, Blanks::Skip);
  EXPECT_EQ(scan.status, Status::Ok);
  EXPECT_EQ(scan.value, 42'000'000U);
  EXPECT_EQ(scan.digits, 4U);  // leading zeros count, for callers that cap the digits
}

TEST(ScanDuration, ABareNumberNeedsAnEmptySuffixInTheTable) {
  EXPECT_EQ(status_of("5"), Status::UnknownUnit);
  const DurationScan bare = scan_duration("5", kBareIsSeconds, Blanks::NotAllowed);
  EXPECT_EQ(bare.status, Status::Ok);
  EXPECT_EQ(bare.value, 5000U);
  EXPECT_EQ(scan_duration("5m", kBareIsSeconds, Blanks::NotAllowed).value, 300'000U);
}

TEST(ScanDuration, OnlyTheTablesSuffixesExactlyAsWritten) {
  for (const char* text : {"1h", "1MS", "1Ms", "1sec", "1 m s", "1u", "1m"}) {
    EXPECT_EQ(status_of(text), Status::UnknownUnit) << text;
  }
  // The first entry that matches wins; "ms" is not read as "m" followed by garbage.
  EXPECT_EQ(scan_duration("2ms", kBareIsSeconds, Blanks::NotAllowed).value, 2U);
}

TEST(ScanDuration, EmptyTextOrNoLeadingDigitIsNoNumber) {
  for (const char* text : {"", "   ", "\n", "ms", "-1ms", "+1ms", ".5s", "x1s"}) {
    EXPECT_EQ(status_of(text), Status::NoNumber) << text;
    EXPECT_EQ(scan_duration(text, kUnits, Blanks::Skip).digits, 0U) << text;
  }
  EXPECT_EQ(scan_duration("", kBareIsSeconds, Blanks::NotAllowed).status, Status::NoNumber);
}

TEST(ScanDuration, TrailingGarbageIsAnUnknownUnit) {
  for (const char* text : {"1.5ms", "2ms extra", "2ms5", "2ms,", "2 ms 3"}) {
    EXPECT_EQ(status_of(text), Status::UnknownUnit) << text;
  }
  EXPECT_EQ(status_of(std::string_view("2ms\0", 4)), Status::UnknownUnit);
}

TEST(ScanDuration, BlanksAreSkippedOnlyWhenTheCallerSaysSo) {
  for (const char* text : {" 2ms", "2ms\n", "2 ms", "\t2\tms\t"}) {
    const DurationScan skipped = scan_duration(text, kUnits, Blanks::Skip);
    EXPECT_EQ(skipped.status, Status::Ok) << text;
    EXPECT_EQ(skipped.value, 2'000'000U) << text;
    EXPECT_NE(scan_duration(text, kUnits, Blanks::NotAllowed).status, Status::Ok) << text;
  }
  EXPECT_EQ(scan_duration(" 2s", kBareIsSeconds, Blanks::NotAllowed).status, Status::NoNumber);
  EXPECT_EQ(scan_duration("2 ", kBareIsSeconds, Blanks::NotAllowed).status, Status::UnknownUnit);
}

TEST(ScanDuration, ANumberAboveTheBoundIsTooLargeWhateverFollows) {
  EXPECT_EQ(scan_duration("18446744073709551609ns", kUnits, Blanks::Skip).value, kMaxDurationNumber);
  for (const char* text : {"18446744073709551610ns", "18446744073709551615ns", "18446744073709551616ns",
                           "99999999999999999999s", "184467440737095516090ns", "99999999999999999999xyz"}) {
    EXPECT_EQ(status_of(text), Status::NumberTooLarge) << text;
  }
  // Leading zeros do not make a number large.
  EXPECT_EQ(scan_duration("000000000000000000000000001s", kUnits, Blanks::Skip).value, 1'000'000'000U);
}

TEST(ScanDuration, AProductThatDoesNotFitIn64BitsIsRefused) {
  EXPECT_EQ(scan_duration("18446744073s", kUnits, Blanks::Skip).value, 18'446'744'073'000'000'000U);
  EXPECT_EQ(status_of("18446744074s"), Status::ProductTooLarge);
  EXPECT_EQ(scan_duration("18446744073709ms", kUnits, Blanks::Skip).status, Status::Ok);
  EXPECT_EQ(status_of("18446744073710ms"), Status::ProductTooLarge);
  EXPECT_EQ(status_of("18446744073709551609us"), Status::ProductTooLarge);
}

}  // namespace
}  // namespace gpuslice::text
