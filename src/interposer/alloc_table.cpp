#include "interposer/alloc_table.h"

#include <atomic>
#include <new>
#include <unordered_map>

namespace gpuslice::interposer {
namespace {

constexpr std::size_t kShards = 64;

struct alignas(64) Shard {
  std::atomic_flag busy = ATOMIC_FLAG_INIT;
  std::unordered_map<std::uint64_t, AllocEntry> entries;
};

struct Tables {
  Shard shards[static_cast<int>(AllocKind::Count)][kShards];
};

std::atomic<Tables*> g_tables{nullptr};

Tables& tables() {
  Tables* t = g_tables.load(std::memory_order_acquire);
  if (t != nullptr) [[likely]]
    return *t;
  auto* fresh = new Tables();
  Tables* expected = nullptr;
  if (g_tables.compare_exchange_strong(expected, fresh, std::memory_order_acq_rel)) return *fresh;
  delete fresh;
  return *expected;
}

Shard& shard_for(AllocKind kind, std::uint64_t key) {
  // Allocations are aligned, so the low bits carry no information; mix before picking a shard.
  std::uint64_t h = key * 0x9E3779B97F4A7C15ULL;
  return tables().shards[static_cast<int>(kind)][h >> 58];
}

class ShardLock {
 public:
  explicit ShardLock(Shard& s) : s_(s) {
    while (s_.busy.test_and_set(std::memory_order_acquire)) {
      while (s_.busy.test(std::memory_order_relaxed)) {
      }
    }
  }
  ~ShardLock() { s_.busy.clear(std::memory_order_release); }
  ShardLock(const ShardLock&) = delete;
  ShardLock& operator=(const ShardLock&) = delete;

 private:
  Shard& s_;
};

std::atomic<std::uint64_t> g_count{0};

}  // namespace

void track_allocation(AllocKind kind, std::uint64_t key, AllocEntry entry) {
  Shard& s = shard_for(kind, key);
  ShardLock lock(s);
  s.entries[key] = entry;
  g_count.fetch_add(1, std::memory_order_relaxed);
}

std::optional<AllocEntry> untrack_allocation(AllocKind kind, std::uint64_t key) {
  Shard& s = shard_for(kind, key);
  ShardLock lock(s);
  auto it = s.entries.find(key);
  if (it == s.entries.end()) return std::nullopt;
  AllocEntry e = it->second;
  s.entries.erase(it);
  g_count.fetch_sub(1, std::memory_order_relaxed);
  return e;
}

std::uint64_t tracked_allocation_count() { return g_count.load(std::memory_order_relaxed); }

void clear_allocation_tables_after_fork() {
  // The old tables may be mid-update by a thread that no longer exists: abandon them.
  g_tables.store(new (std::nothrow) Tables(), std::memory_order_release);
  g_count.store(0);
}

}  // namespace gpuslice::interposer
