// The filter behind the process-list slots of nvidia-smi's export table (nvml_internal_table.cpp),
// kept apart so it can be tested without a driver: entries of the observed layout
// (abi/nvml_export_table.h) in the caller's buffer, compacted in place to the container's own.
// No allocation, no lock: what `keep` costs is the caller's business.
#pragma once

#include <cstdint>
#include <cstring>

#include "abi/nvml_export_table.h"

namespace gpuslice::interposer {

enum class ExportListResult {
  Filtered,          // *count is now the number of entries kept, at the front of the buffer
  MoreThanCapacity,  // the library said it wrote more entries than the buffer holds
  NameUnterminated,  // an entry's name has no NUL: not the layout we know
};

inline unsigned char* export_entry(unsigned char* entries, unsigned index) {
  return entries + static_cast<std::size_t>(index) * nvml_export::kEntryStride;
}

inline unsigned export_entry_pid(const unsigned char* entry) {
  std::uint32_t pid = 0;
  std::memcpy(&pid, entry + nvml_export::kPidOffset, sizeof pid);
  return pid;
}

// Wipes `n` entries, so that nothing of another tenant is left behind in the caller's buffer.
inline void clear_export_entries(unsigned char* entries, unsigned n) {
  std::memset(entries, 0, static_cast<std::size_t>(n) * nvml_export::kEntryStride);
}

// `entries` holds `*count` entries written by the library into a buffer of `capacity` entries.
// Keeps those whose pid `keep(pid)` accepts, in their order, at the front, wipes the rest and sets
// *count to the number kept. Fails closed: when the count exceeds the capacity, or any entry's name
// is not terminated within its bytes, *count becomes 0 and what the buffer holds is wiped.
template <class Keep>
ExportListResult keep_own_export_entries(unsigned char* entries, unsigned capacity, unsigned* count,
                                         Keep&& keep) {
  const unsigned n = *count;
  if (n > capacity) {
    clear_export_entries(entries, capacity);
    *count = 0;
    return ExportListResult::MoreThanCapacity;
  }
  for (unsigned i = 0; i < n; ++i) {
    if (std::memchr(export_entry(entries, i) + nvml_export::kNameOffset, 0, nvml_export::kNameBytes) ==
        nullptr) {
      clear_export_entries(entries, n);
      *count = 0;
      return ExportListResult::NameUnterminated;
    }
  }
  unsigned kept = 0;
  for (unsigned i = 0; i < n; ++i) {
    unsigned char* entry = export_entry(entries, i);
    if (!keep(export_entry_pid(entry))) continue;
    if (kept != i) std::memmove(export_entry(entries, kept), entry, nvml_export::kEntryStride);
    ++kept;
  }
  clear_export_entries(export_entry(entries, kept), n - kept);
  *count = kept;
  return ExportListResult::Filtered;
}

}  // namespace gpuslice::interposer
