// The reclaim board (interposer/reclaim/reclaim_board.h): records between containers in a node
// directory, and what a reader refuses to believe.
#include "interposer/reclaim/reclaim_board.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "shared_state/peer_record.h"
#include "temp_dir.h"

namespace gpuslice::interposer::reclaim {
namespace {

constexpr const char* kGpu = "GPU-6d6f636b-0000-4000-8000-000000000000";

std::uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(ts.tv_nsec);
}

TEST(ReclaimBoard, ARecordSurvivesItsEncodingAndNothingElseDoes) {
  BoardEntry e;
  e.container_key = 7;
  e.pid = 42;
  e.priority = Priority::High;
  e.heartbeat_ns = 5;
  e.above_guarantee = 1;
  e.movable = 2;
  e.on_host = 3;
  e.wanted = 4;
  e.within_guarantee = true;
  const std::uint64_t gpu = shm::detail::uuid_hash(kGpu);
  BoardRecord r = encode(e, gpu);
  BoardEntry back;
  ASSERT_TRUE(decode(r, gpu, &back));
  EXPECT_EQ(back.container_key, 7u);
  EXPECT_EQ(back.priority, Priority::High);
  EXPECT_EQ(back.wanted, 4u);
  EXPECT_TRUE(back.within_guarantee);
  EXPECT_FALSE(decode(r, gpu + 1, &back)) << "another GPU's record";
  BoardRecord bad = r;
  bad.wanted = 1ULL << 40;  // changed without its checksum
  EXPECT_FALSE(decode(bad, gpu, &back));
  bad = r;
  bad.priority = 9;
  bad.checksum = encode(e, gpu).checksum;
  EXPECT_FALSE(decode(bad, gpu, &back));
}

class ReclaimBoardDir : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    node_ = dir_.path() + "/node";
    ASSERT_EQ(mkdir(node_.c_str(), 0755), 0);
  }
  test::TempDir dir_{"gpuslice-reclaim-board"};
  std::string node_;
};

TEST_F(ReclaimBoardDir, OneContainerReadsWhatAnotherPublishesButNotItsOwn) {
  auto a = Board::open(node_, "writer-a", kGpu, 1);
  auto b = Board::open(node_, "writer-b", kGpu, 2);
  ASSERT_TRUE(a && b);
  BoardEntry asks;
  asks.wanted = 64 << 20;
  asks.within_guarantee = true;
  asks.priority = Priority::Normal;
  ASSERT_TRUE(a->publish(asks));
  BoardEntry lends;
  lends.movable = 128 << 20;
  ASSERT_TRUE(b->publish(lends));
  BoardEntry seen[4];
  ASSERT_EQ(b->read(seen, 4, now_ns()), 1u);
  EXPECT_EQ(seen[0].container_key, 1u);
  EXPECT_EQ(seen[0].wanted, 64u << 20);
  ASSERT_EQ(a->read(seen, 4, now_ns()), 1u);
  EXPECT_EQ(seen[0].movable, 128u << 20);
  // A record removed under its writer (the node channel's cleanup of idle records) comes back at
  // its next publish.
  const std::string name = "reclaim." + std::string(kGpu) + ".0000000000000002." + std::to_string(getpid());
  ASSERT_EQ(unlink((node_ + "/writer-b/" + name).c_str()), 0);
  ASSERT_EQ(a->read(seen, 4, now_ns()), 0u);
  ASSERT_TRUE(b->publish(lends));
  ASSERT_EQ(a->read(seen, 4, now_ns()), 1u);
  EXPECT_EQ(seen[0].movable, 128u << 20);
  // Stale: a record not refreshed for longer than the reader's limit is ignored.
  EXPECT_EQ(a->read(seen, 4, now_ns() + 3'000'000'000ULL), 0u);
  a->withdraw();
  EXPECT_EQ(b->read(seen, 4, now_ns()), 0u) << "withdrawn at exit";
}

TEST_F(ReclaimBoardDir, ARecordPublishedAfterTheReaderTookItsTimeIsFresh) {
  // The reader takes `now`, then lists; a borrower publishing every 20 ms may stamp its record in
  // between. CI's sanitizer stage caught the old check wrapping around on it: an asker read no
  // borrower and failed at once.
  auto a = Board::open(node_, "writer-a", kGpu, 1);
  auto b = Board::open(node_, "writer-b", kGpu, 2);
  ASSERT_TRUE(a && b);
  const std::uint64_t taken = now_ns();
  BoardEntry lends;
  lends.movable = 128 << 20;
  lends.heartbeat_ns = taken + 5'000'000ULL;
  ASSERT_TRUE(b->publish(lends));
  BoardEntry seen[4];
  EXPECT_EQ(a->read(seen, 4, taken), 1u);
  // One stamped further ahead than the stale bound is bogus.
  lends.heartbeat_ns = taken + 3'000'000'000ULL;
  ASSERT_TRUE(b->publish(lends));
  EXPECT_EQ(a->read(seen, 4, taken), 0u);
}

TEST_F(ReclaimBoardDir, ThreadsReadingOneBoardAtOnceEachSeeEveryRecord) {
  // An allocation that asks reads the board while the reclaim thread does: each listing must have
  // its own position in the directory (a dup() of one descriptor shares it, and one thread's
  // rewind or read-to-the-end took the records from the other's listing).
  auto reader = Board::open(node_, "writer-a", kGpu, 1);
  ASSERT_TRUE(reader);
  std::vector<std::unique_ptr<Board>> lenders;
  BoardEntry lends;
  lends.movable = 1 << 20;
  for (std::uint64_t key = 2; key < 10; ++key) {
    lenders.push_back(Board::open(node_, "writer-" + std::to_string(key), kGpu, key));
    ASSERT_TRUE(lenders.back());
    lends.heartbeat_ns = now_ns() + 60'000'000'000ULL;  // fresh for the whole test
    ASSERT_TRUE(lenders.back()->publish(lends));
  }
  const std::uint64_t now = now_ns() + 60'000'000'000ULL;
  std::atomic<int> short_reads{0};
  auto keep_reading = [&] {
    BoardEntry seen[16];
    for (int i = 0; i < 400; ++i)
      if (reader->read(seen, 16, now) != lenders.size()) short_reads.fetch_add(1);
  };
  std::thread other(keep_reading);
  keep_reading();
  other.join();
  EXPECT_EQ(short_reads.load(), 0);
}

TEST_F(ReclaimBoardDir, TheOperatorsAssignmentCapsTheClaimedLevel) {
  auto a = Board::open(node_, "writer-a", kGpu, 1);
  auto b = Board::open(node_, "writer-b", kGpu, 2);
  ASSERT_TRUE(a && b);
  {
    std::ofstream assigned(node_ + "/writer-a.assigned");
    assigned << "priority=low\n";
  }
  ASSERT_EQ(chmod((node_ + "/writer-a.assigned").c_str(), 0644), 0);
  BoardEntry claims;
  claims.priority = Priority::High;
  claims.wanted = 1;
  ASSERT_TRUE(a->publish(claims));
  BoardEntry seen[4];
  ASSERT_EQ(b->read(seen, 4, now_ns()), 1u);
  EXPECT_EQ(seen[0].priority, Priority::Low);
}

TEST_F(ReclaimBoardDir, RecordsAReaderCannotBelieveAreSkipped) {
  auto b = Board::open(node_, "writer-b", kGpu, 2);
  ASSERT_TRUE(b);
  auto a = Board::open(node_, "writer-a", kGpu, 1);
  ASSERT_TRUE(a);
  BoardEntry e;
  e.wanted = 1;
  ASSERT_TRUE(a->publish(e));
  const std::string name = "reclaim." + std::string(kGpu) + ".0000000000000001." + std::to_string(getpid());
  const std::string record = node_ + "/writer-a/" + name;
  // A symbolic link in place of a record is not followed.
  ASSERT_EQ(rename(record.c_str(), (node_ + "/writer-a/target").c_str()), 0);
  ASSERT_EQ(symlink((node_ + "/writer-a/target").c_str(), record.c_str()), 0);
  BoardEntry seen[4];
  EXPECT_EQ(b->read(seen, 4, now_ns()), 0u);
  // A "uid-N" writer directory not owned by uid N is not believed.
  ASSERT_EQ(unlink(record.c_str()), 0);
  ASSERT_EQ(rename((node_ + "/writer-a/target").c_str(), record.c_str()), 0);
  ASSERT_EQ(b->read(seen, 4, now_ns()), 1u);
  const std::string squatter = node_ + "/uid-" + std::to_string(geteuid() + 1);
  ASSERT_EQ(rename((node_ + "/writer-a").c_str(), squatter.c_str()), 0);
  EXPECT_EQ(b->read(seen, 4, now_ns()), 0u);
  // A writer directory anyone may write (no sticky bit) is not believed either.
  ASSERT_EQ(rename(squatter.c_str(), (node_ + "/writer-a").c_str()), 0);
  ASSERT_EQ(chmod((node_ + "/writer-a").c_str(), 0777), 0);
  EXPECT_EQ(b->read(seen, 4, now_ns()), 0u);
}

}  // namespace
}  // namespace gpuslice::interposer::reclaim
