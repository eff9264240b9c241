// The reclaim board: how the containers sharing a GPU ask each other for borrowed memory back
// (docs/quota.md, "Guarantees and borrowing"). Each process that borrows, or waits for memory,
// writes one fixed-size checksummed record in its container's writer directory of the node
// directory (the node channel's, shared_state/node_channel.h):
//   <node dir>/<writer>/reclaim.<gpu uuid>.<container key, 16 hex>.<pid>
// and reads the others' with the node channel's rules: a writer directory is believed only when
// owned as its name says; a record is opened without following links, must be a regular file of
// the record's size with a valid checksum, about this GPU and fresh; the level a record claims is
// capped by its writer's assignment (<writer>.assigned; none: normal). A record can at worst make
// borrowers move what they borrowed (never their guarantee) to host memory: a tenant's record asks,
// the borrower decides from its own books what it holds above its guarantee.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/priority.h"

namespace gpuslice::interposer::reclaim {

// What one process says about itself on the GPU.
struct BoardEntry {
  std::uint64_t container_key = 0;
  std::int32_t pid = 0;
  Priority priority = Priority::Normal;  // read: as believed (the writer's assignment applied)
  std::uint64_t heartbeat_ns = 0;        // CLOCK_MONOTONIC (publish() stamps it)
  // Borrower: what its container holds above its guarantee, and this process's borrowed
  // allocations on the device (movable) and in host memory.
  std::uint64_t above_guarantee = 0;
  std::uint64_t movable = 0;
  std::uint64_t on_host = 0;
  // Asker: bytes its waiting allocations need (0: none waits), and whether its container stays
  // within its guarantee with them.
  std::uint64_t wanted = 0;
  bool within_guarantee = false;
};

// The on-disk record (little-endian host layout); exposed for tests.
struct BoardRecord {
  static constexpr char kMagic[8] = {'G', 'S', 'R', 'C', 'L', 'M', '0', '1'};
  static constexpr std::uint32_t kVersion = 1;
  char magic[8];
  std::uint32_t version;
  std::uint32_t size;
  std::uint64_t uuid_hash;
  std::uint64_t container_key;
  std::int32_t pid;
  std::uint32_t priority;
  std::uint64_t heartbeat_ns;
  std::uint64_t above_guarantee;
  std::uint64_t movable;
  std::uint64_t on_host;
  std::uint64_t wanted;
  std::uint32_t within_guarantee;
  std::uint32_t reserved;
  std::uint64_t checksum;  // FNV-1a 64 over every byte before it
};
static_assert(sizeof(BoardRecord) == 96, "the record size is part of the format");

BoardRecord encode(const BoardEntry& entry, std::uint64_t uuid_hash);
// False for anything that is not a valid record of the GPU `uuid_hash`.
bool decode(const BoardRecord& record, std::uint64_t uuid_hash, BoardEntry* out);

class Board {
 public:
  // Opens (creating) this process's record in <node_dir>/<writer>; null when the node directory or
  // the writer directory cannot be trusted or used (said once by the caller).
  static std::unique_ptr<Board> open(const std::string& node_dir, std::string_view writer,
                                     std::string_view gpu_uuid, std::uint64_t container_key);
  ~Board();
  Board(const Board&) = delete;
  Board& operator=(const Board&) = delete;

  bool publish(const BoardEntry& own);
  // The fresh records of the other processes on the GPU (at most `capacity`); a listing of the node
  // directory and of each believed writer directory.
  std::size_t read(BoardEntry* out, std::size_t capacity, std::uint64_t now_ns,
                   std::uint64_t stale_ns = 2'000'000'000ULL) const;
  // Removes this process's record (at exit).
  void withdraw();

  static constexpr std::size_t kMaxWriters = 4096;
  static constexpr std::size_t kMaxEntriesPerWriter = 256;
  static constexpr std::size_t kMaxRecordsPerWriter = 64;

 private:
  Board(int node_fd, int writer_fd, int fd, std::string name, std::string uuid, std::uint64_t key);
  int node_fd_;
  int writer_fd_;
  std::atomic<int> fd_;  // replaced (never closed before the board is) when the file was removed
  std::string name_;
  std::string uuid_;
  std::uint64_t uuid_hash_;
  std::uint64_t key_;
  pid_t owner_;
};

}  // namespace gpuslice::interposer::reclaim
