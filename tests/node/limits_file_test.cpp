#include "node/limits_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "config/settings.h"
#include "test_util.h"

namespace gpuslice::node {
namespace {

TEST(LimitsFile, RendersWhatConfigReadsBack) {
  test::TempDir dir;
  Limits limits;
  limits.memory = "{\"GPU-aaaaaaaa-1111-4000-8000-000000000000\":1073741824}";
  limits.compute = "30";
  ASSERT_TRUE(write_file_atomically(dir / "limits", render_limits(limits)).ok());

  // The interposer's own reader must see the same caps.
  config::Settings settings;
  config::apply_limits_file(settings, dir / "limits");
  ASSERT_TRUE(settings.ok()) << settings.errors.front();
  EXPECT_EQ(settings.memory.lookup(0, "GPU-aaaaaaaa-1111-4000-8000-000000000000"), 1073741824u);
  EXPECT_EQ(settings.compute.lookup(0, "GPU-aaaaaaaa-1111-4000-8000-000000000000"), 30u);

  auto back = read_limits_file(dir / "limits");
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(back->memory, limits.memory);
  EXPECT_EQ(back->compute, limits.compute);
}

TEST(LimitsFile, ParsesCommentsAndKeepsForeignKeys) {
  auto parsed =
      parse_limits("# caps\n\nGPUSLICE_MEMORY_LIMIT = 8Gi\r\nOTHER=1\nGPUSLICE_COMPUTE_LIMIT=0=30,1=50\n");
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  EXPECT_EQ(parsed->memory, "8Gi");
  EXPECT_EQ(parsed->compute, "0=30,1=50");
  ASSERT_EQ(parsed->other.size(), 1u);
  EXPECT_EQ(parsed->other[0].first, "OTHER");
  EXPECT_NE(render_limits(*parsed).find("OTHER=1\n"), std::string::npos);

  auto bad = parse_limits("GPUSLICE_MEMORY_LIMIT=1Gi\njunk line\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("line 2"), std::string::npos) << bad.error();
}

TEST(LimitsFile, MissingFileIsEmptyAndWriteReplacesAtomically) {
  test::TempDir dir;
  auto missing = read_limits_file(dir / "nope");
  ASSERT_TRUE(missing.ok());
  EXPECT_TRUE(missing->empty());

  const std::string path = dir / "sub/limits";
  ASSERT_TRUE(write_file_atomically(path, "A=1\n").ok());
  struct stat before {};
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  ASSERT_TRUE(write_file_atomically(path, "A=2\n", 0640).ok());
  struct stat after {};
  ASSERT_EQ(::stat(path.c_str(), &after), 0);
  EXPECT_NE(before.st_ino, after.st_ino) << "replaced by rename, not rewritten in place";
  EXPECT_EQ(after.st_mode & 0777, 0640u);
  EXPECT_EQ(test::read_file(path), "A=2\n");
  // No temporary file left behind.
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir / "sub"))
    entries += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(entries, 1);
}

}  // namespace
}  // namespace gpuslice::node
