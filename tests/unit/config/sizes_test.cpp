// Size, percent and log-level grammars of every dialect.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "../test_units.h"
#include "config/parse_internal.h"
#include "config/settings.h"

namespace gpuslice::config {
namespace {

constexpr std::uint64_t kKi = 1ULL << 10;
using test_units::kGi;
using test_units::kMi;
constexpr std::uint64_t kTi = 1ULL << 40;
constexpr std::uint64_t kPi = 1ULL << 50;
constexpr std::uint64_t kEi = 1ULL << 60;

std::uint64_t size_ok(const std::string& text, SizeDialect dialect = SizeDialect::Native) {
  auto r = parse_size(text, dialect);
  EXPECT_TRUE(r.ok()) << "'" << text << "': " << r.error();
  return r.ok() ? *r : 0;
}

std::string size_error(const std::string& text, SizeDialect dialect = SizeDialect::Native) {
  auto r = parse_size(text, dialect);
  EXPECT_FALSE(r.ok()) << "'" << text << "' parsed as " << (r.ok() ? *r : 0);
  return r.ok() ? std::string() : r.error();
}

TEST(ParseSize, NativeBinaryUnitsInEveryCase) {
  for (const char* unit : {"Ki", "ki", "KI", "kI", "KiB", "kib", "KIB"})
    EXPECT_EQ(size_ok(std::string("3") + unit), 3 * kKi);
  for (const char* unit : {"Mi", "mi", "MiB", "mib"}) EXPECT_EQ(size_ok(std::string("5") + unit), 5 * kMi);
  for (const char* unit : {"Gi", "gi", "GiB", "GIB"}) EXPECT_EQ(size_ok(std::string("16") + unit), 16 * kGi);
  for (const char* unit : {"Ti", "TiB", "ti"}) EXPECT_EQ(size_ok(std::string("2") + unit), 2 * kTi);
  for (const char* unit : {"Pi", "PiB"}) EXPECT_EQ(size_ok(std::string("7") + unit), 7 * kPi);
  for (const char* unit : {"Ei", "EiB"}) EXPECT_EQ(size_ok(std::string("15") + unit), 15 * kEi);
}

TEST(ParseSize, NativeDecimalUnitsInEveryCase) {
  for (const char* unit : {"K", "k", "KB", "kb", "Kb"}) EXPECT_EQ(size_ok(std::string("3") + unit), 3000u);
  for (const char* unit : {"M", "m", "MB", "mb"}) EXPECT_EQ(size_ok(std::string("5") + unit), 5000000u);
  for (const char* unit : {"G", "g", "GB", "gB"}) EXPECT_EQ(size_ok(std::string("4") + unit), 4000000000u);
  for (const char* unit : {"T", "TB"}) EXPECT_EQ(size_ok(std::string("2") + unit), 2000000000000u);
  for (const char* unit : {"P", "PB"}) EXPECT_EQ(size_ok(std::string("1") + unit), 1000000000000000u);
  for (const char* unit : {"E", "EB"}) EXPECT_EQ(size_ok(std::string("18") + unit), 18000000000000000000u);
}

TEST(ParseSize, PlainBytesAndByteUnit) {
  EXPECT_EQ(size_ok("1"), 1u);
  EXPECT_EQ(size_ok("4294967296"), 4294967296u);
  EXPECT_EQ(size_ok("512B"), 512u);
  EXPECT_EQ(size_ok("512b"), 512u);
  EXPECT_EQ(size_ok("007"), 7u);
}

TEST(ParseSize, HcsExamplesFromItsDocumentation) {
  EXPECT_EQ(size_ok("16Gi", SizeDialect::Hcs), 16 * kGi);
  EXPECT_EQ(size_ok("4G", SizeDialect::Hcs), 4000000000u);
  EXPECT_EQ(size_ok("1024Mi", SizeDialect::Hcs), kGi);
  EXPECT_EQ(size_ok("2GiB", SizeDialect::Hcs), 2 * kGi);
  EXPECT_EQ(size_ok("2GB", SizeDialect::Hcs), 2000000000u);
  EXPECT_EQ(size_ok("8KiB", SizeDialect::Hcs), 8 * kKi);
  EXPECT_EQ(size_ok("8KB", SizeDialect::Hcs), 8000u);
  EXPECT_EQ(size_ok("3MB", SizeDialect::Hcs), 3000000u);
  EXPECT_EQ(size_ok("3MiB", SizeDialect::Hcs), 3 * kMi);
}

TEST(ParseSize, HamiSingleLettersAreBinaryInAnyCase) {
  EXPECT_EQ(size_ok("1g", SizeDialect::Hami), kGi);
  EXPECT_EQ(size_ok("1G", SizeDialect::Hami), kGi);
  EXPECT_EQ(size_ok("1024m", SizeDialect::Hami), kGi);
  EXPECT_EQ(size_ok("1024M", SizeDialect::Hami), kGi);
  EXPECT_EQ(size_ok("1048576k", SizeDialect::Hami), kGi);
  EXPECT_EQ(size_ok("1048576K", SizeDialect::Hami), kGi);
  EXPECT_EQ(size_ok("2t", SizeDialect::Hami), 2 * kTi);
  EXPECT_EQ(size_ok("1073741824", SizeDialect::Hami), kGi);
  EXPECT_EQ(size_ok("0.5g", SizeDialect::Hami), kGi / 2);
}

TEST(ParseSize, HamiRefusesUnitsItDoesNotWrite) {
  EXPECT_NE(size_error("1Gi", SizeDialect::Hami).find("unknown unit 'Gi'"), std::string::npos);
  size_error("1gb", SizeDialect::Hami);
  size_error("1GiB", SizeDialect::Hami);
  size_error("1b", SizeDialect::Hami);
}

TEST(ParseSize, BytesDialectTakesDigitsOnly) {
  EXPECT_EQ(size_ok("4294967296", SizeDialect::Bytes), 4294967296u);
  EXPECT_EQ(size_ok(" 42 ", SizeDialect::Bytes), 42u);
  EXPECT_NE(size_error("4Gi", SizeDialect::Bytes).find("plain bytes only"), std::string::npos);
  size_error("4k", SizeDialect::Bytes);
  EXPECT_NE(size_error("1.0", SizeDialect::Bytes).find("fractions are not allowed"), std::string::npos);
}

TEST(ParseSize, SurroundingWhitespaceIsAllowed) {
  EXPECT_EQ(size_ok("  8Gi"), 8 * kGi);
  EXPECT_EQ(size_ok("8Gi \t\n"), 8 * kGi);
  EXPECT_EQ(size_ok("\r\n 1g \r\n", SizeDialect::Hami), kGi);
}

TEST(ParseSize, InnerWhitespaceIsRefused) {
  EXPECT_NE(size_error("8 Gi").find("no space"), std::string::npos);
  size_error("8\tGi");
  size_error("8G i");
  size_error("1 024");
}

TEST(ParseSize, FractionsThatMakeWholeBytes) {
  EXPECT_EQ(size_ok("1.5Gi"), 1610612736u);
  EXPECT_EQ(size_ok("0.5Ki"), 512u);
  EXPECT_EQ(size_ok("0.3K"), 300u);
  EXPECT_EQ(size_ok("2.25Mi"), 2359296u);
  EXPECT_EQ(size_ok("1.000000Gi"), kGi);
  EXPECT_EQ(size_ok("2.0"), 2u);
  EXPECT_EQ(size_ok("0.000000000000000001E"), 1u);
  EXPECT_EQ(size_ok("0.0009765625Ki"), 1u);  // 1/1024 Ki
}

TEST(ParseSize, FractionsThatDoNotMakeWholeBytes) {
  EXPECT_NE(size_error("1.5").find("not a whole number of bytes"), std::string::npos);
  size_error("0.3Ki");
  size_error("0.3k", SizeDialect::Hami);
  size_error("1.0000000001K");
  EXPECT_NE(size_error("1.000000000000000000001Ei").find("too many digits"), std::string::npos);
}

TEST(ParseSize, MalformedFractions) {
  EXPECT_NE(size_error(".5Gi").find("digit before '.'"), std::string::npos);
  EXPECT_NE(size_error("5.Gi").find("digits after '.'"), std::string::npos);
  size_error("1..5Gi");
  size_error("1.5.5Gi");
  size_error("1,5Gi");
}

// 2^64-1 is how the ledger stores "no quota": as a size it would silently mean unlimited.
TEST(ParseSize, AllOnesIsRejectedNotSilentlyUnlimited) {
  for (SizeDialect dialect : {SizeDialect::Native, SizeDialect::Bytes, SizeDialect::Hami, SizeDialect::Hcs}) {
    EXPECT_NE(size_error("18446744073709551615", dialect).find("means 'no limit'"), std::string::npos);
  }
  EXPECT_EQ(size_ok("18446744073709551614"), 18446744073709551614u);
}

TEST(ParseSize, OverflowBoundaries) {
  EXPECT_NE(size_error("18446744073709551616").find("larger than 18446744073709551615"), std::string::npos);
  size_error("18446744073709551616", SizeDialect::Bytes);
  size_error("99999999999999999999999999999999999999999999");
  EXPECT_EQ(size_ok("15Ei"), 15 * kEi);
  EXPECT_NE(size_error("15.999999999999999999Ei").find("not a whole number"), std::string::npos);
  size_error("16Ei");
  size_error("16EiB");
  EXPECT_EQ(size_ok("16777215Ti"), 16777215 * kTi);
  size_error("16777216Ti");
  EXPECT_EQ(size_ok("18E"), 18000000000000000000u);
  size_error("19E");
  size_error("17179869184g", SizeDialect::Hami);  // 2^34 GiB = 2^64
  EXPECT_EQ(size_ok("17179869183g", SizeDialect::Hami), 17179869183 * kGi);
  size_error("18446744073709551615k", SizeDialect::Hami);
}

TEST(ParseSize, NegativeEmptyJunkAndZero) {
  EXPECT_NE(size_error("-1").find("negative"), std::string::npos);
  EXPECT_NE(size_error("-8Gi").find("negative"), std::string::npos);
  EXPECT_NE(size_error(" -0").find("negative"), std::string::npos);
  size_error("+8Gi");
  EXPECT_EQ(size_error(""), "empty value");
  EXPECT_EQ(size_error("   \t "), "empty value");
  EXPECT_NE(size_error("Gi").find("expected a number"), std::string::npos);
  EXPECT_NE(size_error("8Gx").find("unknown unit 'Gx'"), std::string::npos);
  size_error("8Gi!");
  size_error("8GiBB");
  size_error("0x10");
  size_error("1e9");
  size_error("8Gi8");
  size_error("abc");
  EXPECT_NE(size_error("0").find("greater than 0"), std::string::npos);
  size_error("0Gi");
  size_error("0.0Mi");
}

TEST(ParseSize, JunkIsShownPrintably) {
  const std::string error = size_error(std::string("8G\x01\nx\x7f", 6));
  EXPECT_NE(error.find("G\\x01\\x0ax\\x7f"), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos);
}

TEST(ParseSize, HamiZeroIsAllowedOnlyInternally) {
  auto zero = detail::parse_size_value("0g", SizeDialect::Hami, /*allow_zero=*/true);
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(*zero, 0u);
  EXPECT_FALSE(parse_size("0g", SizeDialect::Hami).ok());
}

TEST(ParsePercent, AcceptsOneToHundred) {
  EXPECT_EQ(*parse_percent("1"), 1u);
  EXPECT_EQ(*parse_percent("30"), 30u);
  EXPECT_EQ(*parse_percent("100"), 100u);
  EXPECT_EQ(*parse_percent(" 50 "), 50u);
  EXPECT_EQ(*parse_percent("0050"), 50u);
}

TEST(ParsePercent, RefusesEverythingElse) {
  for (const char* text : {"0", "101", "1000", "-5", "50.5", "50%", "", "  ", "abc", "5 0", "+5",
                           "99999999999999999999", "1e2", "0x10"}) {
    auto r = parse_percent(text);
    EXPECT_FALSE(r.ok()) << "'" << text << "' parsed as " << (r.ok() ? *r : 0);
  }
  EXPECT_NE(parse_percent("101").error().find("1 to 100"), std::string::npos);
  EXPECT_NE(parse_percent("50.5").error().find("fractions"), std::string::npos);
  EXPECT_NE(parse_percent("-5").error().find("negative"), std::string::npos);
}

TEST(ParsePercent, ZeroAllowedOnlyInternally) {
  EXPECT_EQ(*detail::parse_percent_value("0", /*allow_zero=*/true), 0u);
  EXPECT_FALSE(detail::parse_percent_value("101", /*allow_zero=*/true).ok());
}

TEST(ParseLogLevel, NamesAndNumbers) {
  EXPECT_EQ(*parse_log_level("error"), log::Level::Error);
  EXPECT_EQ(*parse_log_level("WARN"), log::Level::Warn);
  EXPECT_EQ(*parse_log_level("warning"), log::Level::Warn);
  EXPECT_EQ(*parse_log_level(" Info "), log::Level::Info);
  EXPECT_EQ(*parse_log_level("debug"), log::Level::Debug);
  EXPECT_EQ(*parse_log_level("trace"), log::Level::Trace);
  EXPECT_EQ(*parse_log_level("0"), log::Level::Error);
  EXPECT_EQ(*parse_log_level("3"), log::Level::Debug);
  EXPECT_EQ(*parse_log_level("4"), log::Level::Trace);
  for (const char* text : {"5", "-1", "", "verbose", "10", "de bug", "01"})
    EXPECT_FALSE(parse_log_level(text).ok()) << text;
}

TEST(ParseLogLevel, LibcudaNumbersFollowHamiCore) {
  EXPECT_EQ(*parse_libcuda_log_level("0"), log::Level::Error);
  EXPECT_EQ(*parse_libcuda_log_level("1"), log::Level::Warn);
  EXPECT_EQ(*parse_libcuda_log_level("2"), log::Level::Info);
  EXPECT_EQ(*parse_libcuda_log_level("3"), log::Level::Info);
  EXPECT_EQ(*parse_libcuda_log_level("4"), log::Level::Debug);
  for (const char* text : {"5", "debug", "", "-1"}) EXPECT_FALSE(parse_libcuda_log_level(text).ok()) << text;
}

}  // namespace
}  // namespace gpuslice::config
