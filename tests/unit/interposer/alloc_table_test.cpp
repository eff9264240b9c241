// The interposer's live-allocation table under concurrency (TSan runs this in CI).
#include "interposer/alloc_table.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace gpuslice::interposer {
namespace {

TEST(AllocTable, TracksAndUntracksEachKindSeparately) {
  track_allocation(AllocKind::Linear, 0x1000, AllocEntry{64, 0});
  track_allocation(AllocKind::VmmHandle, 0x1000, AllocEntry{128, 1});  // same number, other key space
  auto linear = untrack_allocation(AllocKind::Linear, 0x1000);
  ASSERT_TRUE(linear.has_value());
  EXPECT_EQ(linear->bytes, 64u);
  EXPECT_FALSE(untrack_allocation(AllocKind::Linear, 0x1000).has_value())
      << "a double free is not counted twice";
  auto vmm = untrack_allocation(AllocKind::VmmHandle, 0x1000);
  ASSERT_TRUE(vmm.has_value());
  EXPECT_EQ(vmm->bytes, 128u);
  EXPECT_EQ(vmm->ledger_dev, 1);
}

TEST(AllocTable, HoldsManyMoreThanSixtyFiveThousandEntries) {
  const std::uint64_t before = tracked_allocation_count();
  for (std::uint64_t i = 0; i < 200000; ++i)
    track_allocation(AllocKind::Array, (i + 1) << 8, AllocEntry{i, 0});
  EXPECT_EQ(tracked_allocation_count(), before + 200000);
  std::uint64_t sum = 0;
  for (std::uint64_t i = 0; i < 200000; ++i) sum += untrack_allocation(AllocKind::Array, (i + 1) << 8)->bytes;
  EXPECT_EQ(sum, 200000ULL * 199999ULL / 2);
  EXPECT_EQ(tracked_allocation_count(), before);
}

TEST(AllocTable, ConcurrentThreadsNeverLoseOrDuplicateEntries) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 20000;
  std::atomic<std::uint64_t> untracked_bytes{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &untracked_bytes] {
      for (int i = 0; i < kPerThread; ++i) {
        std::uint64_t key = (static_cast<std::uint64_t>(t) << 40) | (static_cast<std::uint64_t>(i) << 9);
        track_allocation(AllocKind::Linear, key, AllocEntry{1, 0});
        if (i % 2 == 1) {
          std::uint64_t prev =
              (static_cast<std::uint64_t>(t) << 40) | (static_cast<std::uint64_t>(i - 1) << 9);
          if (auto e = untrack_allocation(AllocKind::Linear, prev)) untracked_bytes += e->bytes;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(untracked_bytes.load(), static_cast<std::uint64_t>(kThreads) * kPerThread / 2);
  std::uint64_t remaining = 0;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 1; i < kPerThread; i += 2) {
      std::uint64_t key = (static_cast<std::uint64_t>(t) << 40) | (static_cast<std::uint64_t>(i) << 9);
      if (auto e = untrack_allocation(AllocKind::Linear, key)) remaining += e->bytes;
    }
  }
  EXPECT_EQ(remaining, static_cast<std::uint64_t>(kThreads) * kPerThread / 2);
}

}  // namespace
}  // namespace gpuslice::interposer
