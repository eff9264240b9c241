// What the NVML hooks share: whether an NVML device is part of this container's slice, which
// processes are the container's own, and lists of NVML's size protocol fetched whole into bounded
// memory. The view is virtualised only on devices with a limit; elsewhere every hook forwards.
#pragma once

#include <sys/mman.h>

#include <cstdint>
#include <type_traits>

#include "abi/nvml_abi.h"
#include "shared_state/layout.h"

namespace gpuslice::interposer {

// The container ledger's record of an NVML device when this container has a memory quota or a
// compute limit on it, else -1 (no limit configured, device not limited, or not describable).
// `physical_total` is the card's memory, recorded when the container first attaches the device.
int nvml_slice_record(nvmlDevice_t device, unsigned long long physical_total);
int nvml_slice_record(nvmlDevice_t device);  // asks NVML for the card's memory first
// This container has a limit on some device (a slice): calls without a device argument follow it.
bool nvml_slice_active();

// The container's memory quota and use on an NVML device; false when it has no memory quota there.
bool slice_memory(nvmlDevice_t device, unsigned long long physical_total, std::uint64_t* quota,
                  std::uint64_t* used);

// The slice's view of a successful nvmlDeviceGetMemoryInfo(_v2) answer, in place, consistent with
// cuMemGetInfo_v2: total = the quota (or the card, if smaller); used = the container's use (at
// most total); free = what is left of the quota, but never more than the card really has free
// (other tenants and the driver's own reservation use it too). The part of the slice the card
// cannot give now is v2's `reserved`, so used + free + reserved = total and reserved <= quota; v1
// has no such field and, as NVML's v1 does with the driver's reservation, counts it in `used`
// (used + free = total). A v2 struct of the wrong version is the real library's to refuse.
template <class Memory>
void apply_slice_memory_view(nvmlDevice_t device, Memory* memory) {
  std::uint64_t quota = 0;
  std::uint64_t used = 0;
  if (memory == nullptr || !slice_memory(device, memory->total, &quota, &used)) return;
  const std::uint64_t card_free = memory->free;
  if (quota < memory->total) memory->total = quota;
  if (used > memory->total) used = memory->total;
  const std::uint64_t slice_free = memory->total - used;
  memory->free = slice_free < card_free ? slice_free : card_free;
  if constexpr (std::is_same_v<Memory, nvmlMemory_v2_t>) {
    memory->used = used;
    memory->reserved = slice_free - memory->free;
  } else {
    memory->used = memory->total - memory->free;
  }
}

// The pids by which NVML may know the container's live processes: each registered process's pid
// in its own namespace and, when recorded, its host pid. An NVML entry whose pid is not here is
// another tenant's, or one the ledger cannot map; either way it is hidden.
class OwnPids {
 public:
  // Reads the ledger's live processes (a snapshot: NVML queries are not a hot path); empty when
  // there is no ledger or it cannot be read, which hides every entry.
  void collect();
  bool contains(unsigned pid) const;
  unsigned count() const { return count_; }

 private:
  static constexpr unsigned kCapacity = 2 * gpuslice::shm::layout::kMaxSlots;
  unsigned pids_[kCapacity];
  unsigned count_ = 0;
};

// A list filled through NVML's size protocol: `kInline` entries on the stack, more in an anonymous
// mapping (bounded stack use whatever the card runs; lists are rarely long).
template <class T, unsigned kInline = 64>
class NvmlList {
 public:
  NvmlList() = default;
  ~NvmlList() {
    if (items_ != inline_) munmap(items_, static_cast<std::size_t>(capacity_) * sizeof(T));
  }
  NvmlList(const NvmlList&) = delete;
  NvmlList& operator=(const NvmlList&) = delete;

  // Calls query(buffer, &count) with the capacity in `count`; on NVML_ERROR_INSUFFICIENT_SIZE grows
  // to the size asked for (plus room for processes starting meanwhile) and asks again, a few times.
  template <class Query>
  nvmlReturn_t fill(Query&& query) {
    for (int attempt = 0; attempt < 4; ++attempt) {
      unsigned n = capacity_;
      nvmlReturn_t r = query(items_, &n);
      if (r == NVML_SUCCESS) {
        count_ = n <= capacity_ ? n : capacity_;
        return r;
      }
      if (r != NVML_ERROR_INSUFFICIENT_SIZE || n <= capacity_ || !grow(n + n / 4 + 8)) return r;
    }
    return NVML_ERROR_UNKNOWN;  // the list keeps growing faster than it can be read
  }

  T* begin() { return items_; }
  T* end() { return items_ + count_; }
  unsigned size() const { return count_; }
  T& operator[](unsigned i) { return items_[i]; }

 private:
  bool grow(unsigned capacity) {
    constexpr unsigned kLimit = 1U << 20;  // a bound on what a misbehaving library can make us map
    if (capacity > kLimit) return false;
    void* p = mmap(nullptr, static_cast<std::size_t>(capacity) * sizeof(T), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return false;
    if (items_ != inline_) munmap(items_, static_cast<std::size_t>(capacity_) * sizeof(T));
    items_ = static_cast<T*>(p);
    capacity_ = capacity;
    return true;
  }

  T inline_[kInline];
  T* items_ = inline_;
  unsigned capacity_ = kInline;
  unsigned count_ = 0;
};

// The pid an NVML list entry is about (a bare pid for the accounting list).
inline unsigned pid_of(unsigned pid) { return pid; }
template <class Entry>
unsigned pid_of(const Entry& entry) {
  return entry.pid;
}

// Keeps the entries of `list` that belong to the container and hands them to the caller's buffer
// under NVML's size protocol, counting the filtered list: `*count` in is the caller's capacity,
// out the number of own entries. `own.contains(pid)` says whose an entry is (OwnPids);
// `convert(const From&) -> To` maps one entry.
template <class From, unsigned N, class Own, class To, class Convert>
nvmlReturn_t hand_out_own(NvmlList<From, N>& list, const Own& own, unsigned* count, To* out,
                          Convert&& convert) {
  unsigned kept = 0;
  for (const From& e : list)
    if (own.contains(pid_of(e))) ++kept;
  if (*count < kept) {
    *count = kept;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  if (kept == 0) {
    *count = 0;
    return NVML_SUCCESS;
  }
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned i = 0;
  for (const From& e : list)
    if (i < kept && own.contains(pid_of(e))) out[i++] = convert(e);
  *count = i;
  return NVML_SUCCESS;
}

// The whole list through `query(buffer, &count)` (NVML's size protocol), then the container's
// entries handed to the caller's buffer: `*count` in is its capacity, out the number handed out.
template <class Entry, class Query>
nvmlReturn_t hand_out_own_list(Query&& query, unsigned* count, Entry* out) {
  NvmlList<Entry> all;
  nvmlReturn_t r = all.fill(query);
  if (r != NVML_SUCCESS) return r;
  OwnPids own;
  own.collect();
  return hand_out_own(all, own, count, out, [](const Entry& e) { return e; });
}

// The same for a list NVML returns inside a struct of the caller's (version, count and array in
// one): the real library is asked with a copy pointing at our buffer, so it still checks the
// version and mode itself. `capacity` is what the caller's struct offers, out what was handed out.
template <class Entry, class List, class Real>
nvmlReturn_t hand_out_own_struct_list(Real real, nvmlDevice_t device, List* list, unsigned List::*count,
                                      Entry* List::*array, unsigned* capacity) {
  return hand_out_own_list<Entry>(
      [&](Entry* buffer, unsigned* n) {
        List ask = *list;
        ask.*count = *n;
        ask.*array = buffer;
        nvmlReturn_t answer = real(device, &ask);
        *n = ask.*count;
        return answer;
      },
      capacity, list->*array);
}

}  // namespace gpuslice::interposer
