// Live allocations of this process: handle -> (bytes, ledger device). Any number of entries, O(1)
// average per operation, sharded so threads allocating at once rarely meet on a lock (there is no
// global lock). Only used while a memory quota is active.
#pragma once

#include <cstdint>
#include <optional>

namespace gpuslice::interposer {

// Separate key spaces: a VMM handle and a device pointer may hold the same number.
// IpcImport: another process's memory opened here, with what the driver's per-process figure grew
// by (memory_books.h, open_imported). Context, GreenContext: a further context's footprint, by handle.
enum class AllocKind : std::uint8_t {
  Linear,
  Array,
  MipmappedArray,
  VmmHandle,
  IpcImport,
  Context,
  GreenContext,
  Count
};

struct AllocEntry {
  std::uint64_t bytes = 0;
  int ledger_dev = -1;
};

void track_allocation(AllocKind kind, std::uint64_t key, AllocEntry entry);
// Removes and returns the entry, or nothing if the key was not allocated through a quota.
std::optional<AllocEntry> untrack_allocation(AllocKind kind, std::uint64_t key);
std::uint64_t tracked_allocation_count();

// After fork the child owns none of the parent's allocations; also resets locks another thread of
// the parent may have held at the moment of the fork.
void clear_allocation_tables_after_fork();

}  // namespace gpuslice::interposer
