// The read-only limits file: caps kept apart from the environment, missing/unreadable/malformed files.
#include "config/limits_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

#include "../test_units.h"
#include "config/settings.h"
#include "temp_dir.h"

namespace gpuslice::config {
namespace {

using test_units::kGi;

class LimitsFile : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.empty()) << "mkdtemp failed"; }

  void write(const std::string& text) {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out << text;
  }

  Settings apply(const std::string& text, Settings settings = {}) {
    write(text);
    apply_limits_file(settings, path_);
    return settings;
  }

  std::string single_error(const std::string& text) {
    Settings s = apply(text);
    EXPECT_EQ(s.errors.size(), 1u) << text;
    return s.errors.empty() ? std::string() : s.errors[0];
  }

  gpuslice::test::TempDir temp_{"gpuslice-config-test"};  // removed with all it holds at the end
  const std::string dir_ = temp_.path();
  const std::string path_ = temp_ / "limits";
};

Settings with_memory(const std::string& text) {
  Settings s;
  s.memory = *parse_device_values(text, ValueKind::Size, SizeDialect::Native);
  return s;
}

TEST_F(LimitsFile, MissingFileIsFine) {
  Settings s = with_memory("8Gi");
  apply_limits_file(s, dir_ + "/absent");
  apply_limits_file(s, dir_ + "/absent/deeper");
  apply_limits_file(s, "");
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.memory.lookup(0, ""), 8 * kGi);
  EXPECT_TRUE(s.memory_cap.empty());
}

// The caps never merge into the environment's requests: the limit that applies is computed from
// both where both are kept (the ledger), so a rewritten cap can neither raise nor undo a request.
TEST_F(LimitsFile, CapsAreKeptApartFromTheEnvironment) {
  Settings s = apply("GPUSLICE_MEMORY_LIMIT=0=4Gi,1=16Gi\n", with_memory("8Gi"));
  ASSERT_TRUE(s.ok()) << s.errors[0];
  EXPECT_EQ(s.memory.lookup(0, ""), 8 * kGi);
  EXPECT_EQ(s.memory_cap.lookup(0, ""), 4 * kGi);
  EXPECT_EQ(s.memory_cap.lookup(1, ""), 16 * kGi);
  EXPECT_EQ(s.memory_cap.lookup(2, ""), std::nullopt);
  EXPECT_TRUE(s.has_limits());
}

TEST_F(LimitsFile, ARewrittenFileReplacesTheCaps) {
  Settings s = apply("GPUSLICE_MEMORY_LIMIT=2Gi\nGPUSLICE_COMPUTE_LIMIT=30\n");
  ASSERT_TRUE(s.ok()) << s.errors[0];
  write("GPUSLICE_COMPUTE_LIMIT=0=25\n");
  apply_limits_file(s, path_);
  ASSERT_TRUE(s.ok()) << s.errors[0];
  EXPECT_EQ(s.memory_cap.lookup(5, "gpu-x"), std::nullopt);
  EXPECT_EQ(s.compute_cap.lookup(0, ""), 25u);
  EXPECT_EQ(s.compute_cap.lookup(1, ""), std::nullopt);
}

TEST_F(LimitsFile, UuidCapsAnswerByUuid) {
  const std::string uuid = "GPU-3430f778-7a25-704c-9090-8b0bb2478114";
  Settings s = apply("GPUSLICE_MEMORY_LIMIT={\"" + uuid + "\": \"1Gi\"}\n", with_memory("0=8Gi,1=512Mi"));
  ASSERT_TRUE(s.ok()) << s.errors[0];
  EXPECT_EQ(s.memory_cap.lookup(0, uuid), kGi);
  EXPECT_EQ(s.memory_cap.lookup(1, "gpu-other"), std::nullopt);
  EXPECT_EQ(s.memory.lookup(1, uuid), 512ull << 20);
}

TEST_F(LimitsFile, CommentsBlankLinesWhitespaceQuotesAndCrlf) {
  Settings s = apply(
      "# caps set by the administrator\n"
      "\n"
      "   \t\n"
      "  # indented comment\n"
      "  GPUSLICE_MEMORY_LIMIT = \"6Gi\"  \r\n"
      "GPUSLICE_COMPUTE_LIMIT='40'\r\n",
      with_memory("8Gi"));
  ASSERT_TRUE(s.ok()) << s.errors[0];
  EXPECT_EQ(s.memory_cap.lookup(0, ""), 6 * kGi);
  EXPECT_EQ(s.compute_cap.lookup(0, ""), 40u);
}

// An operator's tool that truncates and then writes leaves an empty file for a moment: read as "no
// caps", it lifted every cap at the next tick. Empty (or comments only) is malformed; lifting the
// caps takes an explicit `none`.
TEST_F(LimitsFile, AnEmptyFileIsAnErrorNotALiftOfTheCaps) {
  for (const char* text : {"", "\n\n", "# being rewritten\n"}) {
    Settings s = apply(text, with_memory("8Gi"));
    ASSERT_EQ(s.errors.size(), 1u) << text;
    EXPECT_NE(s.errors[0].find("GPUSLICE_MEMORY_LIMIT=none"), std::string::npos) << s.errors[0];
    EXPECT_TRUE(s.memory_cap.empty());
  }
  EXPECT_NE(single_error("").find("is empty"), std::string::npos);
}

TEST_F(LimitsFile, NoneSaysExplicitlyThatAKeyHasNoCap) {
  Settings s = apply("GPUSLICE_MEMORY_LIMIT=none\nGPUSLICE_COMPUTE_LIMIT='none'\n", with_memory("8Gi"));
  EXPECT_TRUE(s.ok()) << s.errors[0];
  EXPECT_TRUE(s.memory_cap.empty());
  EXPECT_TRUE(s.compute_cap.empty());
  Settings one = apply("GPUSLICE_COMPUTE_LIMIT=none\n");
  EXPECT_TRUE(one.ok());
  EXPECT_NE(single_error("GPUSLICE_MEMORY_LIMIT=none\nGPUSLICE_MEMORY_LIMIT=1Gi\n").find("set twice"),
            std::string::npos);
}

TEST_F(LimitsFile, AMissingFileReadsAsMissingNotAsAnEmptyOne) {
  auto missing = read_limits_file(dir_ + "/nothing-here");
  ASSERT_TRUE(missing.ok()) << missing.error();
  EXPECT_TRUE(missing->missing);
  write("GPUSLICE_MEMORY_LIMIT=none\n");
  auto present = read_limits_file(path_);
  ASSERT_TRUE(present.ok()) << present.error();
  EXPECT_FALSE(present->missing);
}

TEST_F(LimitsFile, MalformedValueNamesFileLineAndProblem) {
  const std::string error = single_error("# header\nGPUSLICE_COMPUTE_LIMIT=50\nGPUSLICE_MEMORY_LIMIT=8Gx\n");
  EXPECT_EQ(error.rfind("limits file '" + path_ + "' line 3: GPUSLICE_MEMORY_LIMIT='8Gx': unknown unit", 0),
            0u)
      << error;
}

TEST_F(LimitsFile, MalformedFileAppliesNothing) {
  Settings s = apply("GPUSLICE_MEMORY_LIMIT=1Gi\nGPUSLICE_COMPUTE_LIMIT=500\n", with_memory("8Gi"));
  ASSERT_EQ(s.errors.size(), 1u);
  EXPECT_NE(s.errors[0].find("line 2"), std::string::npos);
  EXPECT_EQ(s.memory.lookup(0, ""), 8 * kGi);
  EXPECT_TRUE(s.memory_cap.empty());
}

// Under MPS the operator's active-thread share of containers below high (config/mps_client.h).
TEST_F(LimitsFile, TheMpsThreadShareIsAPercentOnceOrNone) {
  auto parsed = parse_limits_file("GPUSLICE_MPS_LOW_THREADS=40\n");
  ASSERT_TRUE(parsed) << parsed.error();
  EXPECT_EQ(parsed->mps_low_threads.value_or(0), 40U);
  EXPECT_NE(render_limits_file(*parsed).find("GPUSLICE_MPS_LOW_THREADS=40\n"), std::string::npos);
  parsed = parse_limits_file("GPUSLICE_MPS_LOW_THREADS=none\n");
  ASSERT_TRUE(parsed) << parsed.error();
  EXPECT_FALSE(parsed->mps_low_threads);
  EXPECT_NE(single_error("GPUSLICE_MPS_LOW_THREADS=0\n").find("line 1"), std::string::npos);
  EXPECT_NE(single_error("GPUSLICE_MPS_LOW_THREADS=101\n").find("line 1"), std::string::npos);
  EXPECT_NE(single_error("GPUSLICE_MPS_LOW_THREADS=40\nGPUSLICE_MPS_LOW_THREADS=50\n").find("set twice"),
            std::string::npos);
}

// Under MPS, whether the host gate holds a lower container or the server's client priority alone
// ranks it: the operator's word, once, gate|server|none.
TEST_F(LimitsFile, TheMpsYieldIsGateOrServerOnceOrNone) {
  auto parsed = parse_limits_file("GPUSLICE_MPS_PRIORITY=server\n");
  ASSERT_TRUE(parsed) << parsed.error();
  ASSERT_TRUE(parsed->mps_yield);
  EXPECT_EQ(*parsed->mps_yield, MpsYield::Server);
  EXPECT_NE(render_limits_file(*parsed).find("GPUSLICE_MPS_PRIORITY=server\n"), std::string::npos);
  auto again = parse_limits_file(render_limits_file(*parsed));
  ASSERT_TRUE(again) << again.error();
  EXPECT_EQ(again->mps_yield, parsed->mps_yield);
  parsed = parse_limits_file("GPUSLICE_MPS_PRIORITY=gate\n");
  ASSERT_TRUE(parsed && parsed->mps_yield);
  EXPECT_EQ(*parsed->mps_yield, MpsYield::Gate);
  parsed = parse_limits_file("GPUSLICE_MPS_PRIORITY=none\n");
  ASSERT_TRUE(parsed) << parsed.error();
  EXPECT_FALSE(parsed->mps_yield);
  const std::string bad = single_error("GPUSLICE_MPS_PRIORITY=servers\n");
  EXPECT_NE(bad.find("line 1"), std::string::npos) << bad;
  EXPECT_NE(bad.find("GPUSLICE_MPS_PRIORITY"), std::string::npos) << bad;
  EXPECT_NE(single_error("GPUSLICE_MPS_PRIORITY=gate\nGPUSLICE_MPS_PRIORITY=server\n").find("set twice"),
            std::string::npos);
}

TEST_F(LimitsFile, SyntaxErrors) {
  EXPECT_NE(single_error("GPUSLICE_MEMORY_LIMIT 8Gi\n").find("line 1: expected KEY=VALUE"),
            std::string::npos);
  EXPECT_NE(single_error("GPUSLICE_MEMORY=8Gi\n").find("line 1: unknown key 'GPUSLICE_MEMORY'"),
            std::string::npos);
  EXPECT_NE(single_error("HCS_VRAM_QUOTA=8Gi\n").find("unknown key"), std::string::npos);
  EXPECT_NE(
      single_error("GPUSLICE_PRIORITIES=low\n")
          .find(
              "GPUSLICE_PRIORITY, GPUSLICE_MPS_LOW_THREADS, GPUSLICE_MPS_PRIORITY or GPUSLICE_MPS_COMPUTE)"),
      std::string::npos);
  EXPECT_NE(single_error("GPUSLICE_MEMORY_LIMIT=\n").find("empty value"), std::string::npos);
  EXPECT_NE(single_error("GPUSLICE_MEMORY_LIMIT=8Gi\n\nGPUSLICE_MEMORY_LIMIT=4Gi\n")
                .find("line 3: GPUSLICE_MEMORY_LIMIT is set twice (first on line 1)"),
            std::string::npos);
  EXPECT_NE(
      single_error(std::string("GPUSLICE_MEMORY_LIMIT=8Gi\0\n", 27)).find("line 1: contains a NUL byte"),
      std::string::npos);
  EXPECT_NE(single_error("GPUSLICE_MEMORY_LIMIT=8Gi # inline\n").find("unknown unit"), std::string::npos);
  EXPECT_NE(single_error("GPUSLICE_MEMORY_LIMIT={\"0\": 1,}\n").find("trailing comma"), std::string::npos);
}

TEST_F(LimitsFile, UnreadableOrOddFiles) {
  ASSERT_EQ(::mkdir((dir_ + "/sub").c_str(), 0700), 0);
  Settings dir_settings;
  apply_limits_file(dir_settings, dir_ + "/sub");
  ASSERT_EQ(dir_settings.errors.size(), 1u);
  EXPECT_NE(dir_settings.errors[0].find("not a regular file"), std::string::npos);

  ASSERT_EQ(::mkfifo((dir_ + "/fifo").c_str(), 0600), 0);
  Settings fifo_settings;
  apply_limits_file(fifo_settings, dir_ + "/fifo");  // must not block waiting for a writer
  ASSERT_EQ(fifo_settings.errors.size(), 1u);
  EXPECT_NE(fifo_settings.errors[0].find("not a regular file"), std::string::npos);

  write("GPUSLICE_MEMORY_LIMIT=8Gi\n");
  ASSERT_EQ(::chmod(path_.c_str(), 0), 0);
  if (::access(path_.c_str(), R_OK) != 0) {  // root reads anything; then there is nothing to test
    Settings s;
    apply_limits_file(s, path_);
    ASSERT_EQ(s.errors.size(), 1u);
    EXPECT_NE(s.errors[0].find("cannot open"), std::string::npos) << s.errors[0];
  }
}

TEST(LimitsFileText, RendersWhatItParses) {
  auto parsed =
      parse_limits_file("# caps\nGPUSLICE_MEMORY_LIMIT = '0=8Gi,1=4Gi'\nGPUSLICE_COMPUTE_LIMIT=30\n");
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  const std::string text = render_limits_file(*parsed, "header");
  EXPECT_EQ(text, "# header\nGPUSLICE_MEMORY_LIMIT=0=8Gi,1=4Gi\nGPUSLICE_COMPUTE_LIMIT=30\n");
  auto again = parse_limits_file(text);
  ASSERT_TRUE(again.ok()) << again.error();
  EXPECT_EQ(again->memory->values.lookup(1, ""), 4 * kGi);
  EXPECT_EQ(again->compute->values.lookup(7, ""), 30u);
  // No caps at all is written out as such, never as an empty file.
  EXPECT_EQ(render_limits_file(gpuslice::config::LimitsFile{}),
            "GPUSLICE_MEMORY_LIMIT=none\nGPUSLICE_COMPUTE_LIMIT=none\n");
  EXPECT_TRUE(parse_limits_file(render_limits_file(gpuslice::config::LimitsFile{})).ok());
}

// The operator's level (the DRA plugin writes the claim's): a container asking for more runs at it,
// one asking for less keeps its own, one asking for nothing runs at it.
TEST_F(LimitsFile, ThePriorityIsACeilingAndTheDefaultLevel) {
  const std::string file = "GPUSLICE_MEMORY_LIMIT=8Gi\nGPUSLICE_PRIORITY=normal\n";
  Settings asks_high;
  asks_high.priority = Priority::High;
  Settings s = apply(file, asks_high);
  ASSERT_TRUE(s.ok()) << s.errors[0];
  EXPECT_EQ(s.priority, Priority::Normal);
  Settings asks_low;
  asks_low.priority = Priority::Low;
  EXPECT_EQ(apply(file, asks_low).priority, Priority::Low);
  EXPECT_EQ(apply(file).priority, Priority::Normal);
  EXPECT_EQ(apply("GPUSLICE_PRIORITY=High\n").priority, Priority::High) << "a priority alone is a file";
  EXPECT_EQ(apply("GPUSLICE_MEMORY_LIMIT=8Gi\nGPUSLICE_PRIORITY=none\n", asks_high).priority, Priority::High);
  EXPECT_EQ(apply("GPUSLICE_MEMORY_LIMIT=8Gi\n").priority, std::nullopt) << "no level: no part in priorities";
}

TEST_F(LimitsFile, ABadOrRepeatedPriorityNamesTheLine) {
  const std::string bad = single_error("GPUSLICE_MEMORY_LIMIT=8Gi\nGPUSLICE_PRIORITY=urgent\n");
  EXPECT_NE(bad.find("line 2"), std::string::npos) << bad;
  EXPECT_NE(bad.find("GPUSLICE_PRIORITY"), std::string::npos) << bad;
  const std::string twice = single_error("GPUSLICE_PRIORITY=low\nGPUSLICE_PRIORITY=high\n");
  EXPECT_NE(twice.find("set twice (first on line 1)"), std::string::npos) << twice;
  Settings s;
  s.priority = Priority::High;
  EXPECT_EQ(apply("GPUSLICE_PRIORITY=urgent\n", s).priority, Priority::High) << "a bad file applies nothing";
}

TEST(LimitsFileText, ThePriorityIsRenderedOnlyWhenThereIsOne) {
  auto parsed = parse_limits_file("GPUSLICE_COMPUTE_LIMIT=30\nGPUSLICE_PRIORITY=low\n");
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  const std::string text = render_limits_file(*parsed);
  EXPECT_EQ(text, "GPUSLICE_MEMORY_LIMIT=none\nGPUSLICE_COMPUTE_LIMIT=30\nGPUSLICE_PRIORITY=low\n");
  EXPECT_EQ(parse_limits_file(text)->priority, Priority::Low);
}

TEST(LimitsFileText, AValueMustBeOneLineOfAKnownKey) {
  EXPECT_FALSE(parse_limit_value("GPUSLICE_MEMORY_LIMIT", "1Gi\nGPUSLICE_COMPUTE_LIMIT=100").ok());
  EXPECT_FALSE(parse_limit_value("OTHER", "1").ok());
  EXPECT_FALSE(parse_limit_value("GPUSLICE_COMPUTE_LIMIT", "{}").ok());
  EXPECT_TRUE(parse_limit_value("GPUSLICE_COMPUTE_LIMIT", "{\"0\": 20}").ok());
}

TEST_F(LimitsFile, TheGuaranteeIsACapKeptApartFromTheRequest) {
  Settings asks;
  asks.guarantee = *parse_device_values("6Gi", ValueKind::Size, SizeDialect::Native);
  Settings s = apply("GPUSLICE_MEMORY_LIMIT=8Gi\nGPUSLICE_MEMORY_GUARANTEE=0=4Gi,1=2Gi\n", asks);
  ASSERT_TRUE(s.ok()) << s.errors[0];
  EXPECT_EQ(s.guarantee_cap.lookup(0, ""), 4 * kGi);
  EXPECT_EQ(s.guarantee_cap.lookup(1, ""), 2 * kGi);
  EXPECT_EQ(s.guarantee.lookup(0, ""), 6 * kGi) << "the request stays as asked; the ledger applies the cap";
  EXPECT_TRUE(apply("GPUSLICE_MEMORY_GUARANTEE=none\n").guarantee_cap.empty()) << "none: no guarantee cap";
  EXPECT_EQ(apply("GPUSLICE_MEMORY_GUARANTEE=1Gi\n").guarantee_cap.lookup(3, ""), kGi)
      << "a guarantee alone is a file";
}

TEST_F(LimitsFile, AGuaranteeAboveTheLimitNamesBothKeysAndValues) {
  const std::string above = single_error("GPUSLICE_MEMORY_GUARANTEE=10Gi\nGPUSLICE_MEMORY_LIMIT=8Gi\n");
  EXPECT_NE(above.find("line 1"), std::string::npos) << above;
  EXPECT_NE(above.find("GPUSLICE_MEMORY_GUARANTEE='10Gi'"), std::string::npos) << above;
  EXPECT_NE(above.find("GPUSLICE_MEMORY_LIMIT='8Gi' (line 2)"), std::string::npos) << above;
  const std::string per_device =
      single_error("GPUSLICE_MEMORY_LIMIT=0=8Gi,1=2Gi\nGPUSLICE_MEMORY_GUARANTEE=4Gi\n");
  EXPECT_NE(per_device.find("on device 1"), std::string::npos) << per_device;
  EXPECT_TRUE(apply("GPUSLICE_MEMORY_LIMIT=8Gi\nGPUSLICE_MEMORY_GUARANTEE=8Gi\n").ok()) << "equal is fine";
  Settings kept;
  kept.guarantee_cap = *parse_device_values("1Gi", ValueKind::Size, SizeDialect::Native);
  EXPECT_EQ(
      apply("GPUSLICE_MEMORY_LIMIT=1Gi\nGPUSLICE_MEMORY_GUARANTEE=2Gi\n", kept).guarantee_cap.lookup(0, ""),
      kGi)
      << "a bad file applies nothing";
}

TEST_F(LimitsFile, AMalformedOrRepeatedGuaranteeNamesTheLine) {
  const std::string bad = single_error("GPUSLICE_MEMORY_LIMIT=8Gi\nGPUSLICE_MEMORY_GUARANTEE=-1Gi\n");
  EXPECT_NE(bad.find("line 2"), std::string::npos) << bad;
  EXPECT_NE(bad.find("GPUSLICE_MEMORY_GUARANTEE='-1Gi'"), std::string::npos) << bad;
  const std::string twice = single_error("GPUSLICE_MEMORY_GUARANTEE=1Gi\nGPUSLICE_MEMORY_GUARANTEE=2Gi\n");
  EXPECT_NE(twice.find("set twice (first on line 1)"), std::string::npos) << twice;
}

TEST(LimitsFileText, TheGuaranteeIsRenderedOnlyWhenThereIsOne) {
  auto parsed = parse_limits_file("GPUSLICE_MEMORY_LIMIT=8Gi\nGPUSLICE_MEMORY_GUARANTEE=0=2Gi\n");
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  const std::string text = render_limits_file(*parsed);
  EXPECT_EQ(text,
            "GPUSLICE_MEMORY_LIMIT=8Gi\nGPUSLICE_COMPUTE_LIMIT=none\nGPUSLICE_MEMORY_GUARANTEE=0=2Gi\n");
  ASSERT_TRUE(parse_limits_file(text)->guarantee);
  EXPECT_EQ(parse_limits_file(text)->guarantee->values.lookup(0, ""), 2 * kGi);
  EXPECT_TRUE(parse_limit_value("GPUSLICE_MEMORY_GUARANTEE", "4Gi").ok());
  EXPECT_FALSE(parse_limit_value("GPUSLICE_MEMORY_GUARANTEE", "50%").ok());
}

TEST_F(LimitsFile, TooLargeFile) {
  std::string big(1024 * 1024 + 1, '#');
  EXPECT_NE(single_error(big).find("is 1048577 bytes, more than the 1048576 accepted"), std::string::npos)
      << single_error(big);
}

// Under MPS, the operator's choice of how a compute limit holds (config/mps_client.h); `time` by default.
TEST_F(LimitsFile, TheMpsComputeModeIsThreadsTimeOrNoneOnce) {
  auto parsed = parse_limits_file("GPUSLICE_MPS_COMPUTE=threads\n");
  ASSERT_TRUE(parsed) << parsed.error();
  EXPECT_EQ(parsed->mps_compute, MpsComputeMode::Threads);
  EXPECT_NE(render_limits_file(*parsed).find("GPUSLICE_MPS_COMPUTE=threads\n"), std::string::npos);
  EXPECT_EQ(parse_limits_file(render_limits_file(*parsed))->mps_compute, MpsComputeMode::Threads);
  parsed = parse_limits_file("GPUSLICE_MPS_COMPUTE='time'\n");
  ASSERT_TRUE(parsed) << parsed.error();
  EXPECT_EQ(parsed->mps_compute, MpsComputeMode::Time);
  parsed = parse_limits_file("GPUSLICE_MPS_COMPUTE=none\n");
  ASSERT_TRUE(parsed) << parsed.error();
  EXPECT_FALSE(parsed->mps_compute);
  EXPECT_EQ(render_limits_file(*parsed).find("GPUSLICE_MPS_COMPUTE"), std::string::npos);
  const std::string bad = single_error("GPUSLICE_COMPUTE_LIMIT=30\nGPUSLICE_MPS_COMPUTE=sm\n");
  EXPECT_NE(bad.find("line 2"), std::string::npos) << bad;
  EXPECT_NE(bad.find("GPUSLICE_MPS_COMPUTE"), std::string::npos) << "names the variable: " << bad;
  EXPECT_NE(bad.find("sm"), std::string::npos) << "and the value: " << bad;
  EXPECT_NE(single_error("GPUSLICE_MPS_COMPUTE=threads\nGPUSLICE_MPS_COMPUTE=time\n").find("set twice"),
            std::string::npos);
}

TEST_F(LimitsFile, TheMpsComputeModeComesFromTheFileOnly) {
  EXPECT_EQ(Settings{}.mps_compute, MpsComputeMode::Time);
  Settings s = apply("GPUSLICE_MPS_COMPUTE=threads\n");
  ASSERT_TRUE(s.ok()) << s.errors[0];
  EXPECT_EQ(s.mps_compute, MpsComputeMode::Threads);
  s = apply("GPUSLICE_COMPUTE_LIMIT=30\n", s);
  EXPECT_EQ(s.mps_compute, MpsComputeMode::Time) << "a file without the key is the default";
  // The tenant's environment cannot choose it.
  const Settings from_env = load_settings([](const char* name) -> const char* {
    return std::string(name) == "GPUSLICE_MPS_COMPUTE" ? "threads" : nullptr;
  });
  EXPECT_EQ(from_env.mps_compute, MpsComputeMode::Time);
}

}  // namespace
}  // namespace gpuslice::config
