// NVML's internal export table that nvidia-smi reads its process views from (the Processes box of
// its default output, `-q` and `--query-compute-apps`). Undocumented: everything here is what was
// observed of nvidia-smi 580.65.06 on the 580 driver branch, and nothing is known of other branches.
// The table is an array of 8-byte words: word 0 is its size in bytes, word i (i >= 1) the function
// of slot i.
#pragma once

#include <cstddef>
#include <cstdint>

#include "abi/nvml_abi.h"

namespace gpuslice::nvml_export {

// The table's id as nvmlInternalGetExportTable takes it: GUID 6c3efec4-8fc9-4e6c-a327-ee696e12f7c4
// in its in-memory (little-endian fields) form.
inline constexpr unsigned char kProcessTableId[16] = {0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e,
                                                      0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4};

// Slots 213-215: per-device process lists, fn(device, &count, entries, <passed through>). `count`
// in is the capacity of `entries` in entries, out the number written. Other slots have other
// shapes and must never be called as lists.
inline constexpr unsigned kFirstProcessListSlot = 213;
inline constexpr unsigned kLastProcessListSlot = 215;
using ProcessListFn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned* count, void* entries, void* extra);

// One entry of those lists (no struct: the layout is fixed by offsets, not by a compiler's padding).
inline constexpr std::size_t kEntryStride = 4128;
inline constexpr std::size_t kPidOffset = 0;               // u32
inline constexpr std::size_t kUsedMemoryOffset = 8;        // u64 usedGpuMemory
inline constexpr std::size_t kGpuInstanceOffset = 16;      // u32
inline constexpr std::size_t kComputeInstanceOffset = 20;  // u32
inline constexpr std::size_t kProtectedMemoryOffset = 24;  // u64 usedGpuCcProtectedMemory
inline constexpr std::size_t kNameOffset = 32;             // the process name, NUL-terminated
inline constexpr std::size_t kNameBytes = 4096;
static_assert(kNameOffset + kNameBytes == kEntryStride);

}  // namespace gpuslice::nvml_export
