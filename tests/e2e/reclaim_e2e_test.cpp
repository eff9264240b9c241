// End to end: memory that follows priority (docs/quota.md, "Guarantees and borrowing"). Two
// containers (their own shared dirs, one node dir) on one simulated GPU of 256 MiB, the real
// libgpuslice.so under LD_PRELOAD. A borrower allocates above its guarantee (VMM-backed); a
// container within its guarantee then allocates what the device no longer has: the borrower moves
// borrowed memory to host memory (its data bitwise identical), the asker's allocation succeeds,
// and the memory comes back when the asker freed it.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "process.h"

namespace gpuslice::test {
namespace {

constexpr long long kMiB = 1LL << 20;

std::string field(const char* name, long long value) {
  return std::string("\"") + name + "\":" + std::to_string(value);
}

class ReclaimE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir("gpuslice-reclaim-e2e-");
    ASSERT_FALSE(dir_.empty());
    ASSERT_EQ(mkdir((dir_ + "/node").c_str(), 0700), 0);
  }
  void TearDown() override { remove_tree(dir_); }

  Env container_env(const std::string& name, const char* limit, const char* guarantee) const {
    Env env = node_container_env(dir_, name, GPUSLICE_MOCK_DIR, GPUSLICE_PRELOAD);
    env["GPUSLICE_MOCK_MEMORY"] = std::to_string(256 * kMiB);
    env["GPUSLICE_MOCK_CONTEXT_BYTES"] = std::to_string(8 * kMiB);
    env["GPUSLICE_MEMORY_LIMIT"] = limit;
    if (guarantee != nullptr) env["GPUSLICE_MEMORY_GUARANTEE"] = guarantee;
    return env;
  }

  std::vector<std::string> app(const std::vector<std::string>& args) const {
    std::vector<std::string> argv{GPUSLICE_RECLAIM_APP};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }

  Outcome status(const std::string& name) const {
    Env env;
    env["PATH"] = "/usr/bin:/bin";
    return run({GPUSLICE_CLI, "status", "--json", "--shared-dir", dir_ + "/" + name}, env);
  }

  // Polls the container's `gpuslice status --json` until it contains every needle.
  bool status_shows(const std::string& name, const std::vector<std::string>& needles, int timeout_ms,
                    std::string* last) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    do {
      Outcome o = status(name);
      *last = o.out + o.err;
      bool all = o.exit_code == 0;
      for (const auto& n : needles) all = all && o.out.find(n) != std::string::npos;
      if (all) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    } while (std::chrono::steady_clock::now() < deadline);
    return false;
  }

  // The borrower: limit 256 MiB, guarantee 64 MiB; 12 x 16 MiB, so 9 of them (144 MiB) borrowed.
  Env borrower_env() const { return container_env("borrower", "256Mi", "64Mi"); }
  // It runs until stop_borrower() (at most `seconds`).
  std::vector<std::string> borrower_argv(int seconds) const {
    return app({"borrower", "--count", "12", "--mib", "16", "--seconds", std::to_string(seconds),
                "--stop-file", dir_ + "/stop"});
  }
  void stop_borrower() const {
    FILE* f = std::fopen((dir_ + "/stop").c_str(), "w");
    if (f != nullptr) std::fclose(f);
  }

  std::string dir_;
};

TEST_F(ReclaimE2E, AboveTheGuaranteeCuMemAllocIsBorrowedAndCounted) {
  Background borrower(borrower_argv(60), borrower_env(), dir_ + "/borrower.out");
  ASSERT_TRUE(borrower.wait_for_output("allocated=12", 10000)) << borrower.output();
  std::string last;
  // 8 MiB context + 3 x 16 within the guarantee; the 4th allocation crossed it: 9 x 16 borrowed.
  EXPECT_TRUE(status_shows("borrower", {field("borrowed_bytes", 9 * 16 * kMiB), field("on_host_bytes", 0)},
                           5000, &last))
      << last;
  stop_borrower();
  EXPECT_EQ(borrower.wait(), 0) << borrower.output();
  EXPECT_NE(borrower.output().find("mismatches=0"), std::string::npos) << borrower.output();
  EXPECT_NE(borrower.output().find("freed=12"), std::string::npos) << borrower.output();
  EXPECT_TRUE(status_shows("borrower", {field("borrowed_bytes", 0), field("used_bytes", 0)}, 5000, &last))
      << last;
}

TEST_F(ReclaimE2E, AnAskerWithinItsGuaranteeGetsBorrowedMemoryBackAndItIsRestoredAfter) {
  // The borrower writes and reads back all its memory all the time; each 16 MiB move copies for
  // 100 ms, reading at its start: a write let through during a move would be lost.
  Env env = borrower_env();
  env["GPUSLICE_MOCK_DTOD_BYTES_PER_S"] = std::to_string(160 * kMiB);
  std::vector<std::string> argv = borrower_argv(60);
  argv.insert(argv.end(), {"--rewrite", "1"});
  Background borrower(argv, env, dir_ + "/borrower.out");
  ASSERT_TRUE(borrower.wait_for_output("allocated=12", 10000)) << borrower.output();
  std::string last;
  ASSERT_TRUE(status_shows("borrower", {field("borrowed_bytes", 9 * 16 * kMiB)}, 5000, &last)) << last;
  // Free: 256 - (8 + 192) - 8 = 48 MiB. The asker (guarantee 128 MiB) wants 88 MiB.
  Background asker(app({"asker", "--mib", "88", "--hold-ms", "500"}),
                   container_env("asker", "192Mi", "128Mi"), dir_ + "/asker.out");
  ASSERT_TRUE(asker.wait_for_output("ask_identical=", 10000)) << asker.output();
  const std::string said = asker.output();
  EXPECT_NE(said.find("ask_code=0"), std::string::npos) << said;
  EXPECT_NE(said.find("ask_identical=1"), std::string::npos) << said;
  // 40 MiB were missing: the borrower moved its largest allocations, 3 x 16 MiB, to host memory.
  EXPECT_TRUE(status_shows("borrower",
                           {field("on_host_bytes", 3 * 16 * kMiB), field("borrowed_bytes", 6 * 16 * kMiB),
                            field("reclaim_episodes", 1), field("reclaim_bytes", 3 * 16 * kMiB)},
                           3000, &last))
      << last;
  // The books hold what is on the device: 8 + 3 x 16 within the guarantee + 6 x 16 borrowed.
  EXPECT_NE(last.find(field("used_bytes", (8 + 9 * 16) * kMiB)), std::string::npos) << last;
  Env plain;
  plain["PATH"] = "/usr/bin:/bin";
  Outcome text = run({GPUSLICE_CLI, "status", "--shared-dir", dir_ + "/borrower"}, plain);
  EXPECT_NE(text.out.find("moved to host memory"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("1 reclaim episode(s)"), std::string::npos) << text.out;
  ASSERT_TRUE(asker.wait_for_output("asker_freed=1", 5000)) << asker.output();
  // Restored once the asker freed: all borrowed memory back on the device.
  EXPECT_TRUE(status_shows("borrower", {field("on_host_bytes", 0), field("borrowed_bytes", 9 * 16 * kMiB)},
                           3000, &last))
      << last;
  stop_borrower();
  EXPECT_EQ(borrower.wait(), 0);
  EXPECT_NE(borrower.output().find("mismatches=0"), std::string::npos)
      << "bitwise identical throughout: " << borrower.output();
  EXPECT_EQ(asker.wait(), 0);
}

// Memsets (1D/2D, 8/16/32-bit, sync and stream-ordered), 2D/3D copies and peer copies from a
// thread of the borrower, all the time, while its borrowed memory moves to host memory and back:
// each is held while a move runs (a write into the old backing during the copy would be lost),
// so every write reads back as written, during the moves and after the restore.
class ReclaimWritesE2E : public ReclaimE2E, public ::testing::WithParamInterface<int> {};

TEST_P(ReclaimWritesE2E, MemsetsAndShapedPeerAndBatchedCopiesAndStreamMemOpsDuringAMoveAreHeldAndNoneIsLost) {
  // All 26 kinds of write; or only the stream memory operations and the batched copies (from kind
  // 21), which the writer then never waits for elsewhere: unheld, their writes are lost.
  const int first_kind = GetParam();
  Env env = borrower_env();
  env["GPUSLICE_MOCK_DTOD_BYTES_PER_S"] = std::to_string(160 * kMiB);  // each 16 MiB move: 100 ms
  Background writer(app({"writer", "--count", "12", "--mib", "16", "--seconds", "60", "--stop-file",
                         dir_ + "/stop", "--first-kind", std::to_string(first_kind)}),
                    env, dir_ + "/writer.out");
  ASSERT_TRUE(writer.wait_for_output("allocated=12", 10000)) << writer.output();
  std::string last;
  ASSERT_TRUE(status_shows("borrower", {field("borrowed_bytes", 9 * 16 * kMiB)}, 5000, &last)) << last;
  // The asker's log at debug level goes with its output: an allocation that does not wait says why.
  Env asker_env = container_env("asker", "192Mi", "128Mi");
  asker_env["GPUSLICE_LOG_LEVEL"] = "debug";
  Background asker(app({"asker", "--mib", "88", "--hold-ms", "500"}), asker_env, dir_ + "/asker.out",
                   /*with_stderr=*/true);
  ASSERT_TRUE(asker.wait_for_output("asker_freed=", 10000)) << asker.output();
  EXPECT_NE(asker.output().find("ask_code=0"), std::string::npos) << asker.output();
  // Moved (one episode, 3 x 16 MiB), then restored once the asker freed.
  EXPECT_TRUE(status_shows("borrower",
                           {field("on_host_bytes", 0), field("borrowed_bytes", 9 * 16 * kMiB),
                            field("reclaim_episodes", 1), field("reclaim_bytes", 3 * 16 * kMiB)},
                           3000, &last))
      << last;
  stop_borrower();
  EXPECT_EQ(writer.wait(), 0) << writer.output();
  const std::string said = writer.output();
  EXPECT_NE(said.find("kinds=" + std::to_string(26 - first_kind) + "\n"), std::string::npos)
      << "every kind of write ran: " << said;
  EXPECT_NE(said.find("\nfailed=0\n"), std::string::npos) << said;
  EXPECT_NE(said.find("\nmismatches=0\n"), std::string::npos) << said;
  EXPECT_NE(said.find("final_mismatches=0"), std::string::npos) << said;
  EXPECT_NE(said.find("freed=12"), std::string::npos) << said;
  EXPECT_EQ(asker.wait(), 0);
}

INSTANTIATE_TEST_SUITE_P(FromKind, ReclaimWritesE2E, ::testing::Values(0, 21));

TEST_F(ReclaimE2E, AHigherPriorityWithoutAGuaranteeTakesFromALowerBorrowerButNotFromAnEqualOne) {
  // The operator lets this user's containers run up to high (the node channel's assignment file).
  ASSERT_EQ(chmod((dir_ + "/node").c_str(), 01777), 0);
  FILE* assigned = std::fopen((dir_ + "/node/uid-" + std::to_string(geteuid()) + ".assigned").c_str(), "w");
  ASSERT_NE(assigned, nullptr);
  std::fputs("priority=high\n", assigned);
  std::fclose(assigned);
  Env low = borrower_env();
  low["GPUSLICE_PRIORITY"] = "low";
  Background borrower(borrower_argv(60), low, dir_ + "/borrower.out");
  ASSERT_TRUE(borrower.wait_for_output("allocated=12", 10000)) << borrower.output();
  std::string last;
  ASSERT_TRUE(status_shows("borrower", {field("borrowed_bytes", 9 * 16 * kMiB)}, 5000, &last)) << last;
  // No guarantee, priority low like the borrower: nothing to take; it fails without waiting.
  Env equal = container_env("equal", "192Mi", nullptr);
  equal["GPUSLICE_PRIORITY"] = "low";
  Outcome refused = run(app({"asker", "--mib", "88"}), equal);
  EXPECT_NE(refused.out.find("ask_code=2"), std::string::npos) << refused.out << refused.err;
  EXPECT_LT(refused.num("ask_ms"), 1000) << refused.out;
  EXPECT_TRUE(
      status_shows("borrower", {field("on_host_bytes", 0), field("reclaim_episodes", 0)}, 1000, &last))
      << last;
  // No guarantee, priority high: the low borrower gives.
  Env high = container_env("high", "192Mi", nullptr);
  high["GPUSLICE_PRIORITY"] = "high";
  high["GPUSLICE_LOG_LEVEL"] = "debug";
  Outcome granted = run(app({"asker", "--mib", "88"}), high);
  EXPECT_NE(granted.out.find("ask_code=0"), std::string::npos) << granted.out << granted.err;
  EXPECT_NE(granted.out.find("ask_identical=1"), std::string::npos) << granted.out;
  EXPECT_TRUE(status_shows("borrower", {field("reclaim_episodes", 1)}, 3000, &last)) << last;
  stop_borrower();
  EXPECT_EQ(borrower.wait(), 0);
  EXPECT_NE(borrower.output().find("mismatches=0"), std::string::npos) << borrower.output();
}

TEST_F(ReclaimE2E, WithoutAGuaranteeNothingIsBorrowedAndTheAskerFailsAtOnce) {
  // The borrower has no guarantee: plain memory, nothing to give back; the asker is refused by the
  // driver without waiting.
  Background holder(app({"borrower", "--count", "12", "--mib", "16", "--seconds", "3"}),
                    container_env("borrower", "256Mi", nullptr), dir_ + "/borrower.out");
  ASSERT_TRUE(holder.wait_for_output("allocated=12", 10000)) << holder.output();
  Env env = container_env("asker", "192Mi", "128Mi");
  Outcome o = run(app({"asker", "--mib", "88"}), env);
  EXPECT_NE(o.out.find("ask_code=2"), std::string::npos) << o.out << o.err;
  EXPECT_LT(o.num("ask_ms"), 1000) << "no borrower to wait for";
  holder.kill();
}

TEST_F(ReclaimE2E, ADeadlineMissFailsTheAskerWithOutOfMemoryAndOneClearLine) {
  Background borrower(borrower_argv(60), borrower_env(), dir_ + "/borrower.out");
  ASSERT_TRUE(borrower.wait_for_output("allocated=12", 10000)) << borrower.output();
  std::string last;
  ASSERT_TRUE(status_shows("borrower", {field("borrowed_bytes", 9 * 16 * kMiB)}, 5000, &last)) << last;
  // 224 MiB: more than the free 48 MiB and all 144 MiB borrowed together.
  Env env = container_env("asker", "256Mi", "256Mi");
  env["GPUSLICE_RECLAIM_DEADLINE"] = "500ms";
  Outcome o = run(app({"asker", "--mib", "224"}), env);
  EXPECT_NE(o.out.find("ask_code=2"), std::string::npos) << o.out << o.err;
  EXPECT_GE(o.num("ask_ms"), 500) << o.out;
  EXPECT_NE(o.err.find("GPUSLICE_RECLAIM_DEADLINE"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos) << o.err;
  stop_borrower();
  EXPECT_EQ(borrower.wait(), 0);
  EXPECT_NE(borrower.output().find("mismatches=0"), std::string::npos) << borrower.output();
}

TEST_F(ReclaimE2E, WhatCannotMoveIsNeverBorrowed) {
  // Guarantee 24 MiB: the 16 MiB pitched allocation fits within (with the 8 MiB context); the
  // managed one would take the container above it and cannot move: refused; cuMemAlloc borrows.
  Background app_run(app({"unmovable", "--mib", "16"}), container_env("borrower", "256Mi", "24Mi"),
                     dir_ + "/unmovable.out");
  ASSERT_TRUE(app_run.wait_for_output("alloc_code=", 10000)) << app_run.output();
  const std::string said = app_run.output();
  EXPECT_NE(said.find("pitch_code=0"), std::string::npos) << said;
  EXPECT_NE(said.find("managed_code=2"), std::string::npos) << said;
  EXPECT_NE(said.find("alloc_code=0"), std::string::npos) << said;
  std::string last;
  EXPECT_TRUE(status_shows("borrower",
                           {field("borrowed_bytes", 16 * kMiB), field("unmovable_bytes", (8 + 16) * kMiB),
                            field("used_bytes", (8 + 32) * kMiB)},
                           5000, &last))
      << last;
  app_run.kill();
}

TEST_F(ReclaimE2E, ABorrowerKilledMidMoveLeavesTheBooksExact) {
  // Each 16 MiB move copies for a second: the borrower is killed during the second move. (At 250 ms
  // a move, CI's sanitizer stage polled `gpuslice status` too slowly to see the first one done and
  // the second under way, and found all three done.)
  Env env = borrower_env();
  env["GPUSLICE_MOCK_DTOD_BYTES_PER_S"] = std::to_string(16 * kMiB);
  Background borrower(borrower_argv(30), env, dir_ + "/borrower.out");
  ASSERT_TRUE(borrower.wait_for_output("allocated=12", 10000)) << borrower.output();
  std::string last;
  ASSERT_TRUE(status_shows("borrower", {field("borrowed_bytes", 9 * 16 * kMiB)}, 5000, &last)) << last;
  Env asker_env = container_env("asker", "192Mi", "128Mi");
  asker_env["GPUSLICE_MOCK_DTOD_BYTES_PER_S"] = std::to_string(64 * kMiB);
  asker_env["GPUSLICE_RECLAIM_DEADLINE"] = "10s";
  Background asker(app({"asker", "--mib", "88", "--hold-ms", "3000"}), asker_env, dir_ + "/asker.out");
  // The borrower moves 3 x 16 MiB, one after the other; once the first is in host memory, the
  // second is being copied: it is killed there.
  ASSERT_TRUE(status_shows("borrower", {field("on_host_bytes", 16 * kMiB)}, 5000, &last)) << last;
  borrower.kill(SIGKILL);
  borrower.wait();
  // The driver frees what the dead process held; the asker's allocation then succeeds.
  ASSERT_TRUE(asker.wait_for_output("ask_identical=", 10000)) << asker.output();
  EXPECT_NE(asker.output().find("ask_code=0"), std::string::npos) << asker.output();
  // Its slot is reaped: nothing of it remains in the books.
  EXPECT_TRUE(status_shows("borrower",
                           {field("used_bytes", 0), field("borrowed_bytes", 0), field("on_host_bytes", 0)},
                           5000, &last))
      << last;
  // The asker's books hold its context and its allocation, exactly.
  EXPECT_TRUE(status_shows("asker", {field("used_bytes", (8 + 88) * kMiB)}, 3000, &last)) << last;
}

TEST_F(ReclaimE2E, AMoveCopiesIntoHostMemoryPreparedWhileBorrowingRatherThanPinningItThen) {
  // Pinning host memory takes the driver about a second per 2 GiB: here 250 ms per 16 MiB. The
  // borrower's host memory is prepared in the background once it borrows: the asker's three moves
  // are copies into it (the old code pinned it during the move, holding the borrower and the asker).
  Env env = borrower_env();
  env["GPUSLICE_MOCK_HOST_PIN_BYTES_PER_S"] = std::to_string(64 * kMiB);
  env["GPUSLICE_LOG_LEVEL"] = "debug";
  Background borrower(borrower_argv(60), env, dir_ + "/borrower.out", /*with_stderr=*/true);
  ASSERT_TRUE(borrower.wait_for_output("allocated=12", 10000)) << borrower.output();
  ASSERT_TRUE(borrower.wait_for_output("host memory prepared ahead for all 144.0 MiB borrowed", 15000))
      << borrower.output();
  Env asker_env = container_env("asker", "192Mi", "128Mi");
  Background asker(app({"asker", "--mib", "88", "--hold-ms", "300"}), asker_env, dir_ + "/asker.out");
  ASSERT_TRUE(asker.wait_for_output("ask_code=", 10000)) << asker.output();
  ASSERT_NE(asker.output().find("ask_code=0"), std::string::npos) << asker.output() << borrower.output();
  ASSERT_TRUE(asker.wait_for_output("asker_freed=1", 15000)) << asker.output();
  EXPECT_NE(asker.output().find("ask_identical=1"), std::string::npos) << asker.output();
  std::string last;
  EXPECT_TRUE(status_shows("borrower", {field("on_host_bytes", 0), field("borrowed_bytes", 9 * 16 * kMiB)},
                           5000, &last))
      << last;
  stop_borrower();
  EXPECT_EQ(borrower.wait(), 0);
  const std::string out = borrower.output();
  std::size_t prepared_moves = 0;
  for (std::size_t at = 0;
       (at = out.find("MiB to host: host memory prepared ahead", at)) != std::string::npos; ++at)
    ++prepared_moves;
  EXPECT_EQ(prepared_moves, 3U) << out;
  EXPECT_NE(out.find("mismatches=0"), std::string::npos) << out;
}

}  // namespace
}  // namespace gpuslice::test
