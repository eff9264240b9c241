// take_piece: the line and list splitter of common/text.h (the cgroup and meminfo parsers use it;
// their own grammar is tested in interposer/host_room_test).
#include "common/text.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

namespace gpuslice::text {
namespace {

std::vector<std::string> pieces(std::string_view text, char sep) {
  std::vector<std::string> out;
  while (!text.empty()) out.emplace_back(take_piece(text, sep));
  return out;
}

TEST(TakePiece, SplitsAtEachSeparatorAndKeepsEmptyPiecesInside) {
  EXPECT_EQ(pieces("a,b,,c", ','), (std::vector<std::string>{"a", "b", "", "c"}));
  EXPECT_EQ(pieces("one\ntwo\n", '\n'), (std::vector<std::string>{"one", "two"}));  // a last newline ends it
  EXPECT_EQ(pieces("no separator", ','), (std::vector<std::string>{"no separator"}));
  EXPECT_TRUE(pieces("", ',').empty());
}

TEST(TakePiece, LeavesTheRestAfterTheSeparator) {
  std::string_view rest = "cpu,memory";
  EXPECT_EQ(take_piece(rest, ','), "cpu");
  EXPECT_EQ(rest, "memory");
  EXPECT_EQ(take_piece(rest, ','), "memory");
  EXPECT_TRUE(rest.empty());
}

}  // namespace
}  // namespace gpuslice::text
