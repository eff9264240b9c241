// Libraries (cuLibraryLoadData, cuLibraryLoadFromFile) are context-independent: the driver loads
// their modules into every context of the process, the ones that exist and the ones created later,
// at the context's creation (CUDA_MODULE_LOADING=EAGER) or at its first launch (lazy, the default).
// The CUDA 12+ runtime loads the program's registered fat binaries this way, often before any
// context exists, where no device can be charged at the load. So each library's globals are read at
// the load for the architecture of every device, and every context created while it is loaded
// reserves them with its own footprint, before the driver creates it (refused past the quota).
// Not-yet-taken globals stay owed (DeviceState::module_prepaid) until the driver's figure shows them.
#pragma once

#include <cstdint>

#include "abi/cuda_abi.h"
#include "interposer/runtime.h"

namespace gpuslice::interposer {

// What a library's image declares on each device's architecture (read before the load), and what
// its load reserved on devices where a context exists.
struct LibrarySizes {
  std::uint64_t bytes[kMaxDevices] = {};
  std::uint64_t charged[kMaxDevices] = {};
};
void size_library(const void* image, LibrarySizes* sizes);
// Before the load: reserves its globals on every device but `skip` (the current context's, which the
// load itself charges) where a context exists, as the driver loads it into those contexts too; false
// when one does not fit (nothing is kept reserved).
bool reserve_where_contexts_exist(LibrarySizes* sizes, int skip);
// The load failed: what reserve_where_contexts_exist reserved is given back.
void release_reserved(const LibrarySizes& sizes);
// After a successful load: remembers it. `charged_device` (-1: none) is the device whose current
// context the load itself charged for `charged` bytes (released with the library).
void note_library(CUlibrary library, LibrarySizes& sizes, int charged_device, std::uint64_t charged);
// The globals of the libraries loaded now, on device `device` (a CUDA ordinal).
std::uint64_t library_globals(int device);
// A device's first context reserved `bytes` of library globals (released with the libraries).
void note_first_context_libraries(int device);
// After a successful cuLibraryUnload: what its first contexts were charged for it is given back.
void forget_library(CUlibrary library);
// In a forked child: it holds none of its parent's contexts.
void libraries_after_fork();

}  // namespace gpuslice::interposer
