#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "profiler/profiler.h"
#include "profiler/refusal_limiter.h"
#include "test_support.h"

namespace gpuslice::profiler {
namespace {

constexpr std::uint64_t kSecond = 1'000'000'000;
constexpr std::uint64_t kGi = 1ULL << 30;

TEST(RefusalLimiter, SameDeviceAndSizeReportedOncePerSecond) {
  RefusalLimiter limiter;
  EXPECT_TRUE(limiter.admit(0, kGi, 10 * kSecond).report);
  for (int i = 1; i <= 5; ++i) EXPECT_FALSE(limiter.admit(0, kGi, 10 * kSecond + i * 100'000'000ULL).report);
  const auto verdict = limiter.admit(0, kGi, 11 * kSecond);
  EXPECT_TRUE(verdict.report);
  EXPECT_EQ(verdict.suppressed_before, 5u);
  EXPECT_EQ(limiter.admit(0, kGi, 12 * kSecond).suppressed_before, 0u);
}

TEST(RefusalLimiter, OtherSizesAndDevicesAreSeparateKeys) {
  RefusalLimiter limiter;
  EXPECT_TRUE(limiter.admit(0, kGi, kSecond).report);
  EXPECT_TRUE(limiter.admit(0, 2 * kGi, kSecond).report);
  EXPECT_TRUE(limiter.admit(1, kGi, kSecond).report);
  EXPECT_FALSE(limiter.admit(1, kGi, kSecond + 1).report);
}

TEST(RefusalLimiter, CapsLinesPerSecondOverall) {
  RefusalLimiter limiter;
  int reported = 0;
  for (std::uint64_t size = 1; size <= 50; ++size)
    reported += limiter.admit(0, size, 5 * kSecond + size).report;
  EXPECT_EQ(reported, static_cast<int>(RefusalLimiter::kMaxPerWindow));
  const auto next_window = limiter.admit(0, 1000, 6 * kSecond + 1);
  EXPECT_TRUE(next_window.report);
  EXPECT_EQ(next_window.suppressed_before, 50u - RefusalLimiter::kMaxPerWindow);
}

TEST(RefusalLimiter, ForgetsTheOldestKeyWhenFull) {
  RefusalLimiter limiter;
  std::uint64_t now = 100 * kSecond;
  // Fill every remembered slot, a window at a time so the overall cap does not interfere.
  for (int key = 0; key < RefusalLimiter::kRememberedKeys; ++key, now += kSecond) {
    ASSERT_TRUE(limiter.admit(key, kGi, now).report);
  }
  ASSERT_TRUE(limiter.admit(99, kGi, now).report);  // evicts key 0, the oldest
  EXPECT_TRUE(limiter.admit(0, kGi, now + 1).report);
  EXPECT_FALSE(limiter.admit(99, kGi, now + 2).report) << "recent key still remembered";
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  test::split_lines(text, &lines);
  return lines;
}

// The global limiter outlives each test (and --gtest_repeat). Every test takes times later than any
// used before and first makes one report, which resets the count of suppressed refusals.
std::uint64_t fresh_time() {
  static std::uint64_t next = 1000 * kSecond;
  next += 100 * kSecond;
  EXPECT_TRUE(log_refused_allocation_at(999, 1, 1, 1, "primer", next));
  return next + 10 * kSecond;
}

TEST(RefusedAllocationEvents, WrittenToEventsLogWhileProfiling) {
  test::TempDir dir;
  const char* const names[] = {"cuMemAlloc"};
  Options options;
  options.background_flusher = false;
  options.handle_termination_signals = false;
  const std::uint64_t t0 = fresh_time();
  ASSERT_TRUE(start(dir.path().c_str(), names, 1, options));
  EXPECT_TRUE(log_refused_allocation_at(7, 3 * kGi, 8 * kGi, 6 * kGi, "pid 12 python 6 GiB\nforged", t0));
  EXPECT_FALSE(log_refused_allocation_at(7, 3 * kGi, 8 * kGi, 6 * kGi, "pid 12", t0 + 1));
  EXPECT_FALSE(log_refused_allocation_at(7, 3 * kGi, 8 * kGi, 6 * kGi, "pid 12", t0 + 2));
  EXPECT_TRUE(log_refused_allocation_at(7, 3 * kGi, 8 * kGi, 7 * kGi, nullptr, t0 + kSecond));
  stop();

  const auto lines = lines_of(test::read_file(dir.path() / "events.log"));
  ASSERT_EQ(lines.size(), 2u);
  const std::string pid = " pid:" + std::to_string(getpid()) + " ";
  EXPECT_EQ(lines[0].rfind("time:", 0), 0u);
  EXPECT_NE(lines[0].find(pid), std::string::npos);
  EXPECT_NE(lines[0].find(" event:allocation_refused device:7 requested:3221225472 quota:8589934592 "
                          "in_use:6442450944 suppressed:0 top:pid 12 python 6 GiB forged"),
            std::string::npos)
      << lines[0];
  EXPECT_NE(lines[1].find(" in_use:7516192768 suppressed:2 top:"), std::string::npos) << lines[1];
  EXPECT_EQ(lines[1].substr(lines[1].size() - 5), " top:");
}

TEST(RefusedAllocationEvents, LoggedWithoutProfileDirectory) {
  ASSERT_FALSE(running());
  const std::uint64_t now = fresh_time();
  EXPECT_TRUE(log_refused_allocation_at(-1, 1, 2, 3, "x", now));
  EXPECT_FALSE(log_refused_allocation_at(-1, 1, 2, 3, "x", now + 1));
}

}  // namespace
}  // namespace gpuslice::profiler
