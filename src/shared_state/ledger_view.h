// What can be read from or repaired in a state file's bytes, wherever they are: the process ledger
// works on its mapping, an observer on a private copy (reads) or a fault-guarded mapping (repairs).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "shared_state/layout.h"
#include "shared_state/ledger.h"

namespace gpuslice::shm::detail {

struct LedgerView {
  layout::Header* header = nullptr;
  layout::DeviceRecord* devices = nullptr;
  layout::Slot* slots = nullptr;

  // `base` holds layout::kFileSize bytes, aligned like a Slot.
  static LedgerView over(void* base);

  bool device_ready(int dev) const;
  std::uint32_t high_water() const;
  // Container total on `dev`: never more than what it held at one instant during the call.
  std::uint64_t used(int dev) const;
  int find_device(std::string_view uuid) const;
  int device_count() const;
  Snapshot snapshot(const std::string& path) const;
  // Returns the bytes of slots whose OFD lock (probed through `fd`) is gone; skips `own_slot`.
  int reap_dead(int fd, int own_slot, const std::string& path) const;
  // Returns every byte slot `index` holds and frees it; `word` is the Reaping word we installed.
  void return_slot(std::uint32_t index, std::uint64_t word) const;
};

// Stores the effective limits of a record from its requests and caps (effective_quota /
// effective_compute). Writers may race (a process applying a new cap while `gpuslice set` changes
// the request): each re-reads the inputs after its store and goes again if any moved, so the last
// store always reflects the final inputs.
void recompute_limits(layout::DeviceRecord& r);

// Whether some other open file description holds slot `index`'s lock (on doubt: yes, so a live
// process is never reaped).
bool slot_lock_held(int fd, std::uint32_t index, const std::string& path);

std::uint64_t monotonic_seconds();

}  // namespace gpuslice::shm::detail
