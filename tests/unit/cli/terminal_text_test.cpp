// terminal_text(): the one function every string the CLI shows goes through, and the UUID check of
// state files. Each case is something a terminal would take as a command, or a character to keep.
#include "cli/terminal_text.h"

#include <gtest/gtest.h>

#include "common/text.h"

namespace {

using gpuslice::cli::terminal_columns;
using gpuslice::cli::terminal_text;

TEST(TerminalText, PlainTextAndUtf8CharactersStay) {
  EXPECT_EQ(terminal_text("python train.py --lr=3e-4"), "python train.py --lr=3e-4");
  EXPECT_EQ(terminal_text("caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x9a\x80"),
            "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x9a\x80");
  EXPECT_EQ(terminal_text("\xc2\xa0nbsp"), "\xc2\xa0nbsp") << "U+00A0 is the first character after C1";
}

TEST(TerminalText, C0ControlsAndDelBecomeQuestionMarks) {
  EXPECT_EQ(terminal_text("\x1b]0;title\x07\x1b[2J"), "?]0;title??[2J");
  EXPECT_EQ(terminal_text("a\nb\rc\td\x7f"), "a?b?c?d?");
  EXPECT_EQ(terminal_text(std::string("nul\0x", 5)), "nul?x");
}

TEST(TerminalText, C1ControlsInEitherEncodingBecomeQuestionMarks) {
  EXPECT_EQ(terminal_text("\x9b"
                          "2J"),
            "?2J")
      << "raw CSI";
  EXPECT_EQ(terminal_text("\xc2\x9b"
                          "2J"),
            "?2J")
      << "U+009B in UTF-8";
  EXPECT_EQ(terminal_text("\xc2\x9d"
                          "0;t\xc2\x9c"),
            "?0;t?")
      << "OSC ... ST";
  EXPECT_EQ(terminal_text("\xc2\x80\xc2\x9f"), "??");
}

TEST(TerminalText, MalformedUtf8AndReorderingCharactersBecomeQuestionMarks) {
  EXPECT_EQ(terminal_text("\xc0\x9b"), "??") << "overlong encoding of ESC";
  EXPECT_EQ(terminal_text("\xe0\x80\x9b"), "???") << "overlong three-byte form";
  EXPECT_EQ(terminal_text("\xed\xa0\x80"), "???") << "a surrogate";
  EXPECT_EQ(terminal_text("\xf4\x90\x80\x80"), "????") << "above U+10FFFF";
  EXPECT_EQ(terminal_text("ab\xe2\x80"), "ab??") << "cut short";
  EXPECT_EQ(terminal_text("a\xe2\x80\xae"
                          "cba"),
            "a?cba")
      << "right-to-left override";
  EXPECT_EQ(terminal_text("\xe2\x81\xa6x\xe2\x81\xa9"), "?x?") << "isolates";
}

TEST(TerminalText, CutsToTheWidthInCharactersAndEscapesToItself) {
  EXPECT_EQ(terminal_text("abcdefghij", 8), "abcde...");
  EXPECT_EQ(terminal_text("abcdefgh", 8), "abcdefgh");
  EXPECT_EQ(terminal_text("\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", 4), "\xc3\xa9...");
  EXPECT_EQ(terminal_columns(terminal_text("\xc3\xa9\xc3\xa9x")), 3u);
  const std::string once = terminal_text("\x1b[31m\xc2\x9b\xff caf\xc3\xa9");
  EXPECT_EQ(terminal_text(once), once);
}

TEST(GpuUuid, AcceptsTheFormsNvmlWritesAndNothingElse) {
  using gpuslice::text::is_gpu_uuid;
  EXPECT_TRUE(is_gpu_uuid("GPU-3430f778-7a25-704c-9090-8b0bb2478114"));
  EXPECT_TRUE(is_gpu_uuid("GPU-3430F778-7A25-704C-9090-8B0BB2478114"));
  EXPECT_TRUE(is_gpu_uuid("MIG-3430f778-7a25-704c-9090-8b0bb2478114"));
  EXPECT_TRUE(is_gpu_uuid("MIG-GPU-3430f778-7a25-704c-9090-8b0bb2478114/1/0"));
  EXPECT_FALSE(is_gpu_uuid(""));
  EXPECT_FALSE(is_gpu_uuid("GPU-"));
  EXPECT_FALSE(is_gpu_uuid("GPU-3430f778-7a25-704c-9090-8b0bb247811"));
  EXPECT_FALSE(is_gpu_uuid("GPU-3430f778-7a25-704c-9090-8b0bb24781145"));
  EXPECT_FALSE(is_gpu_uuid("GPU-3430f778-7a25-704c-9090-8b0bb247811g"));
  EXPECT_FALSE(is_gpu_uuid("GPU-3430f778_7a25-704c-9090-8b0bb2478114"));
  EXPECT_FALSE(is_gpu_uuid("gpu-3430f778-7a25-704c-9090-8b0bb2478114"));
  EXPECT_FALSE(is_gpu_uuid("GPU-3430f778-7a25-704c-9090-8b0bb2478114\x1b[2J"));
  EXPECT_FALSE(is_gpu_uuid("MIG-GPU-3430f778-7a25-704c-9090-8b0bb2478114"));
  EXPECT_FALSE(is_gpu_uuid("MIG-GPU-3430f778-7a25-704c-9090-8b0bb2478114/1/"));
  EXPECT_FALSE(is_gpu_uuid("MIG-GPU-3430f778-7a25-704c-9090-8b0bb2478114/1/0/2"));
}

}  // namespace
