#include "shared_state/node_turns.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace gpuslice::shm {
namespace {

constexpr std::uint64_t kPeriod = 100'000'000;
constexpr std::uint64_t kSecond = 1'000'000'000;

class NodeTurnsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/gpuslice-turns-XXXXXX";
    ASSERT_NE(mkdtemp(templ), nullptr);
    dir_ = templ;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::unique_ptr<NodeTurns> open() {
    auto t = NodeTurns::open(dir_, "GPU-test");
    EXPECT_TRUE(t.ok()) << t.error();
    return t.ok() ? std::move(t).value() : nullptr;
  }
  std::string dir_;
};

TEST_F(NodeTurnsTest, AContainerAloneTakesNoTurns) {
  auto a = open();
  EXPECT_EQ(a->refresh(11, 30, kPeriod, 10 * kSecond), kNoTurn);
}

TEST_F(NodeTurnsTest, TwoContainersTakeConsecutiveTurns) {
  auto a = open();  // two processes of two containers: separate mappings of one file
  auto b = open();
  a->refresh(11, 30, kPeriod, 10 * kSecond);
  std::uint64_t b_offset = b->refresh(22, 70, kPeriod, 10 * kSecond);
  std::uint64_t a_offset = a->refresh(11, 30, kPeriod, 10 * kSecond + 1);
  EXPECT_EQ(a_offset, 0u);
  EXPECT_EQ(b_offset, 30 * kPeriod / 100);
}

TEST_F(NodeTurnsTest, ProcessesOfOneContainerShareItsEntry) {
  auto p1 = open();
  auto p2 = open();
  auto other = open();
  p1->refresh(11, 40, kPeriod, 10 * kSecond);
  p2->refresh(11, 40, kPeriod, 10 * kSecond);
  std::uint64_t off = other->refresh(22, 50, kPeriod, 10 * kSecond);
  EXPECT_EQ(off, 40 * kPeriod / 100) << "container 11 must count once";
}

TEST_F(NodeTurnsTest, AStoppedContainerStopsCountingAndItsEntryIsReused) {
  auto a = open();
  auto b = open();
  a->refresh(11, 30, kPeriod, 10 * kSecond);
  EXPECT_NE(b->refresh(22, 70, kPeriod, 10 * kSecond), kNoTurn);
  // Container 11 stops refreshing: 3 s later container 22 is alone again.
  EXPECT_EQ(b->refresh(22, 70, kPeriod, 13 * kSecond), kNoTurn);
  auto c = open();
  EXPECT_EQ(c->refresh(33, 20, kPeriod, 13 * kSecond), 0u) << "the stale first entry is reused";
}

TEST_F(NodeTurnsTest, UnlimitedContainersDoNotTakeTurns) {
  auto a = open();
  auto b = open();
  a->refresh(11, 100, kPeriod, 10 * kSecond);
  EXPECT_EQ(b->refresh(22, 50, kPeriod, 10 * kSecond), kNoTurn);
}

TEST_F(NodeTurnsTest, AForeignFileIsRefusedWithItsPath) {
  {
    std::ofstream f(dir_ + "/turns-GPU-test");
    f << std::string(4096, 'x');
  }
  auto t = NodeTurns::open(dir_, "GPU-test");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().find(dir_ + "/turns-GPU-test"), std::string::npos) << t.error();
}

}  // namespace
}  // namespace gpuslice::shm
