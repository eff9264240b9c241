// NVML hook: nvidia-smi's own route to the process lists. nvidia-smi 580 does not call the public
// list functions (nvml_processes.cpp) for its Processes box, `-q` or `--query-compute-apps`: it
// asks nvmlInternalGetExportTable (undocumented) for a table of internal functions and calls three
// of its slots (abi/nvml_export_table.h). Inside a slice the caller gets a copy of that table in
// which those three slots keep only the container's entries; every other slot is the real one.
// The layout is known from the 580 branch only: on any other driver the table goes out untouched.
#include <sched.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "abi/nvml_export_table.h"
#include "common/log.h"
#include "interposer/hook_prologue.h"
#include "interposer/nvml_export_list.h"
#include "interposer/nvml_slice.h"

namespace gs = gpuslice::interposer;
namespace ex = gpuslice::nvml_export;

namespace {

constexpr long kObservedDriverMajor = 580;
// A bound on the copy (the observed table has a few hundred slots); a larger one goes out untouched.
constexpr std::size_t kMaxTableWords = 4096;
constexpr unsigned kListSlots = ex::kLastProcessListSlot - ex::kFirstProcessListSlot + 1;
constexpr std::size_t kMinTableBytes = (ex::kLastProcessListSlot + 1) * sizeof(std::uint64_t);

enum class TableState : int {
  Unbuilt,      // not decided yet (or the driver's version could not be read: try again)
  Building,     // one thread is deciding; the others wait
  Ready,        // `words` is the copy to hand out
  PassThrough,  // this driver or this table is not the one we know: the real table goes out
};

// What this process hands out for the process table, decided once. Static storage, constant
// initialised: nothing runs at load time and nothing is allocated.
struct ProcessTableCopy {
  std::atomic<TableState> state{TableState::Unbuilt};
  const void* real = nullptr;                // the table the copy was made from
  ex::ProcessListFn lists[kListSlots] = {};  // the real library's list functions
  alignas(8) std::uint64_t words[kMaxTableWords] = {};
};
constinit ProcessTableCopy g_table;

// One of the three list slots: the real function, then the container's entries only. Reached only
// through the copy, which exists only inside a slice (the hook has initialised gpuslice).
template <unsigned kSlot>
nvmlReturn_t own_process_list(nvmlDevice_t device, unsigned* count, void* entries, void* extra) {
  gs::ProfileScope scope(gs::HookId::nvmlInternalGetExportTable);
  const ex::ProcessListFn real = g_table.lists[kSlot - ex::kFirstProcessListSlot];
  if (count == nullptr || entries == nullptr || gs::nvml_slice_record(device) < 0)
    return real(device, count, entries, extra);
  const unsigned capacity = *count;
  const nvmlReturn_t r = real(device, count, entries, extra);
  auto* buffer = static_cast<unsigned char*>(entries);
  if (r != NVML_SUCCESS) {
    // A count that comes with a failure (the size a short buffer lacks) is the card's, other
    // tenants included, and whatever the library may have written is not filtered: neither is shown.
    gs::clear_export_entries(buffer, *count < capacity ? *count : capacity);
    *count = 0;
    return r;
  }
  gs::OwnPids own;
  own.collect();
  const unsigned listed = *count;
  switch (gs::keep_own_export_entries(buffer, capacity, count,
                                      [&own](unsigned pid) { return own.contains(pid); })) {
    case gs::ExportListResult::Filtered:
      break;
    case gs::ExportListResult::MoreThanCapacity: {
      static std::atomic<bool> logged{false};
      if (!logged.exchange(true))
        GS_LOG(Warn, "NVML export table slot %u listed %u processes into room for %u: hiding them all", kSlot,
               listed, capacity);
      break;
    }
    case gs::ExportListResult::NameUnterminated: {
      static std::atomic<bool> logged{false};
      if (!logged.exchange(true))
        GS_LOG(Warn, "NVML export table slot %u: an entry is not of the known layout: hiding every process",
               kSlot);
      break;
    }
  }
  return r;
}

template <unsigned... kSlots>
struct ListWrappers {
  static constexpr ex::ProcessListFn kFns[] = {&own_process_list<kSlots>...};
};
using Wrappers = ListWrappers<213, 214, 215>;
static_assert(sizeof Wrappers::kFns / sizeof Wrappers::kFns[0] == kListSlots &&
              ex::kFirstProcessListSlot == 213 && ex::kLastProcessListSlot == 215);

// The driver branch's major number (580 for "580.159.04"), or -1 when it cannot be read (NVML not
// initialised yet).
long driver_major() {
  static auto get_version = REAL_UNHOOKED(Nvml, nvmlSystemGetDriverVersion);
  char version[96] = {};
  if (get_version == nullptr || get_version(version, sizeof version) != NVML_SUCCESS) return -1;
  char* end = nullptr;
  const long major = std::strtol(version, &end, 10);
  return end != version ? major : 0;
}

// The decision, made by one thread: the state to publish. Fills `g_table` when it is Ready.
TableState decide(const void* real_table) {
  const long major = driver_major();
  if (major < 0) {
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true))
      GS_LOG(Debug, "NVML export table asked for before the driver version can be read: handed out as is");
    return TableState::Unbuilt;
  }
  if (major != kObservedDriverMajor) {
    GS_LOG(Info,
           "driver branch %ld: nvidia-smi's process table is not filtered (its internal layout is known "
           "for branch %ld only); NVML's process-list functions still are",
           major, kObservedDriverMajor);
    return TableState::PassThrough;
  }
  const auto* words = static_cast<const std::uint64_t*>(real_table);
  const std::uint64_t bytes = words[0];
  if (bytes % sizeof(std::uint64_t) != 0 || bytes < kMinTableBytes ||
      bytes > kMaxTableWords * sizeof(std::uint64_t)) {
    GS_LOG(Debug, "NVML export table of %llu bytes is not the layout we know: handed out as is",
           static_cast<unsigned long long>(bytes));
    return TableState::PassThrough;
  }
  std::memcpy(g_table.words, words, bytes);
  for (unsigned i = 0; i < kListSlots; ++i) {
    const std::uint64_t fn = words[ex::kFirstProcessListSlot + i];
    if (fn == 0) continue;  // an empty slot stays empty
    g_table.lists[i] = reinterpret_cast<ex::ProcessListFn>(static_cast<std::uintptr_t>(fn));
    g_table.words[ex::kFirstProcessListSlot + i] = reinterpret_cast<std::uintptr_t>(Wrappers::kFns[i]);
  }
  g_table.real = real_table;
  return TableState::Ready;
}

// The table to hand out instead of `real_table`, or nullptr to hand out the real one.
const void* process_table_copy(const void* real_table) {
  TableState s = g_table.state.load(std::memory_order_acquire);
  while (s == TableState::Unbuilt || s == TableState::Building) {
    if (s == TableState::Building) {
      sched_yield();
      s = g_table.state.load(std::memory_order_acquire);
      continue;
    }
    if (!g_table.state.compare_exchange_weak(s, TableState::Building, std::memory_order_acquire)) continue;
    s = decide(real_table);
    g_table.state.store(s, std::memory_order_release);
    if (s == TableState::Unbuilt) return nullptr;
  }
  if (s != TableState::Ready) return nullptr;
  if (real_table != g_table.real) {  // the library handed out another table: not the one we copied
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true)) GS_LOG(Debug, "NVML export table moved: handed out as is");
    return nullptr;
  }
  return g_table.words;
}

}  // namespace

GS_EXPORT nvmlReturn_t nvmlInternalGetExportTable(const void** ppExportTable, const void* pExportTableId) {
  GS_NVML_HOOK_PROLOGUE(nvmlInternalGetExportTable);
  const nvmlReturn_t r = real(ppExportTable, pExportTableId);
  if (r != NVML_SUCCESS || ppExportTable == nullptr || *ppExportTable == nullptr ||
      pExportTableId == nullptr ||
      std::memcmp(pExportTableId, ex::kProcessTableId, sizeof ex::kProcessTableId) != 0 ||
      !gs::nvml_slice_active())
    return r;
  if (const void* copy = process_table_copy(*ppExportTable); copy != nullptr) *ppExportTable = copy;
  return r;
}
