#include "node/admission/quantity.h"

#include <gtest/gtest.h>

namespace gpuslice::node {
namespace {

std::uint64_t ok(const char* text) {
  auto r = parse_quantity(text);
  EXPECT_TRUE(r.ok()) << text << ": " << r.error();
  return r.ok() ? *r : 0;
}

TEST(Quantity, BinaryAndDecimalSuffixes) {
  EXPECT_EQ(ok("16Gi"), 16ULL << 30);
  EXPECT_EQ(ok("1024Mi"), 1ULL << 30);
  EXPECT_EQ(ok("1Ki"), 1024u);
  EXPECT_EQ(ok("2Ti"), 2ULL << 40);
  EXPECT_EQ(ok("1Ei"), 1ULL << 60);
  EXPECT_EQ(ok("500M"), 500000000u);
  EXPECT_EQ(ok("4G"), 4000000000u);
  EXPECT_EQ(ok("2k"), 2000u);
  EXPECT_EQ(ok("8192"), 8192u);
  EXPECT_EQ(ok("+7"), 7u);
  EXPECT_EQ(ok("0"), 0u);
}

TEST(Quantity, FractionsAndExponents) {
  EXPECT_EQ(ok("1.5Gi"), 3ULL << 29);
  EXPECT_EQ(ok("0.5Ki"), 512u);
  EXPECT_EQ(ok("8e9"), 8000000000u);
  EXPECT_EQ(ok("1E3"), 1000u);
  EXPECT_EQ(ok("120e-1"), 12u);
}

TEST(Quantity, RejectsWhatIsNotAWholeNonNegativeNumber) {
  for (const char* bad : {"", "-1", "-1Gi", "1.5", "1500m", "0.1Ki", "abc", "1Gb", "1GiB", "1 Gi", "1..2",
                          "Gi", "1e", "1e+", "99999999999999999999", "16Ei", "1e30", "1.2.3", "12e-1"}) {
    auto r = parse_quantity(bad);
    EXPECT_FALSE(r.ok()) << "'" << bad << "' was accepted as " << (r.ok() ? *r : 0);
    if (!r.ok()) {
      EXPECT_NE(r.error().find("quantity"), std::string::npos) << r.error();
    }
  }
  EXPECT_EQ(ok("1000m"), 1u);
  EXPECT_EQ(ok("15Ei"), 15ULL << 60);
}

}  // namespace
}  // namespace gpuslice::node
