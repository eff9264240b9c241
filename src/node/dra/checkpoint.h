// What the DRA plugin has prepared on this node, kept in <root>/dra/ (root-only). An entry is
// written as `preparing` before the first file of a claim is created and becomes `prepared` once
// all are, so a daemon killed in between finds on restart exactly which claim's files to remove (the
// kubelet then asks again), and never leaks any.
//
// Two files: checkpoint.json, the whole state (replaced atomically), and checkpoint.journal, one
// JSON line per change since (a claim's entry, or its removal), appended and synced. A prepare
// costs one line, not the whole file; the journal is folded into checkpoint.json once it outgrows
// the state. The state is bounded when it is written (a claim that would pass kMaxCheckpointBytes
// is refused), so what was written can always be read back.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/result.h"

namespace gpuslice::node::dra {

inline constexpr std::size_t kMaxCheckpointBytes = std::size_t{4} * 1024 * 1024;

struct PreparedDevice {
  std::vector<std::string> requests;
  std::string pool, device;
  std::string share_id;  // the allocation's shareID on a shared device
  std::vector<std::string> cdi_ids;
  std::string gpu_uuid;
  std::uint64_t memory_bytes = 0;
  std::uint64_t guarantee_bytes = 0;  // memory guarantee (the claim's memory.request); 0: none
  unsigned compute_percent = 100;     // 100: no compute limit
};

struct CheckpointEntry {
  enum class State { Preparing, Prepared };
  State state = State::Preparing;
  std::string ns, name;
  std::string pod;             // the first pod the claim was reserved for (metrics' pod label)
  std::string container_id;    // <root>/containers/<id>
  std::string cdi_file;        // full path of its CDI spec
  std::string channel_writer;  // <root>/channel/<writer>, empty when the claim has no compute limit
  std::string priority;        // "" or high|normal|low
  std::vector<PreparedDevice> devices;
};

struct Checkpoint {
  std::map<std::string, CheckpointEntry> claims;  // by claim uid
};

// The entry as one JSON text (what the bound counts).
std::string checkpoint_entry_text(const std::string& uid, const CheckpointEntry& entry);

class CheckpointStore {
 public:
  // `dir` holds checkpoint.json and checkpoint.journal.
  explicit CheckpointStore(std::string dir, std::size_t max_bytes = kMaxCheckpointBytes);

  // Reads both files (missing ones are empty). An entry that cannot be read is skipped and named in
  // `skipped` (uid, or the line number, with why): the others are still recovered. An error only when
  // a file cannot be read at all.
  struct Loaded {
    Checkpoint checkpoint;
    std::vector<std::string> skipped;
  };
  Result<Loaded> load();

  // Whether `entry` for `uid` keeps the state within the bound.
  bool fits(const std::string& uid, const CheckpointEntry& entry) const;
  Result<bool> put(const std::string& uid, const CheckpointEntry& entry);
  Result<bool> remove(const std::string& uid);
  // Writes the whole state to checkpoint.json and empties the journal.
  Result<bool> compact();

  const Checkpoint& state() const { return state_; }
  std::uint64_t bytes_written() const { return bytes_written_; }
  std::string base_path() const { return dir_ + "/checkpoint.json"; }
  std::string journal_path() const { return dir_ + "/checkpoint.journal"; }

 private:
  Result<bool> append(const std::string& line);
  void account(const std::string& uid, const CheckpointEntry* entry);

  std::string dir_;
  std::size_t max_bytes_;
  Checkpoint state_;
  std::map<std::string, std::size_t> sizes_;  // entry text bytes per uid
  std::size_t total_ = 0;                     // sum of sizes_
  std::size_t journal_bytes_ = 0;
  std::uint64_t bytes_written_ = 0;
};

}  // namespace gpuslice::node::dra
