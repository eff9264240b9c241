// The contexts' part of the memory books (memory_books.h): what a context's creation reserves, what
// its destruction gives back, and the libraries' globals (library_globals.h) it loads.
#pragma once

#include <cstdint>

#include "abi/cuda_abi.h"
#include "interposer/alloc_table.h"
#include "interposer/memory_books.h"
#include "interposer/runtime.h"

namespace gpuslice::interposer {

// Created around each context-creating call: the first context of the process on a device with a
// ledger record charges its footprint, and (NVML before/after) tells which pid NVML gives this
// process. A device with a record but no memory quota (a compute limit only) is not tracked per
// allocation (its hooks stay a branch and a forward); the watcher's reconciliation then books the
// driver's whole per-process figure, so status and metrics show its real use, not 0.
//
// Under a memory quota, the process's first context on a device reserves the footprint another
// process of the container measured there, before the driver creates it: refused (the hook answers
// CUDA_ERROR_OUT_OF_MEMORY) when the container cannot hold it. Every further context (cuCtxCreate,
// a green context, the primary context retained while it is not held) reserves the footprint
// measured for a context on this device before the driver creates it, is refused when it does not
// fit, and gives it back when it is destroyed (the primary context: released to zero). A context's
// first launch takes launch resources of its own (about 140 MiB on an H200, driver 580), which no
// look right after the creation sees: what the context charge grew by since the last creation (the
// books brought up to date first) is learnt as that growth, and every further context reserves it
// with its footprint; it stays owed (module_prepaid) until the driver's figure shows it taken.
// Every context also reserves the globals of the libraries loaded now (library_globals.h), which
// the driver loads into it at its creation (EAGER) or first launch: owed the same way.
enum class ContextKind : std::uint8_t { Primary, Created, Green };

class ContextCreation {
 public:
  ContextCreation(CUdevice dev, ContextKind kind);
  ~ContextCreation();
  ContextCreation(const ContextCreation&) = delete;
  ContextCreation& operator=(const ContextCreation&) = delete;
  bool refused() const { return refused_; }
  // The driver created the context `handle` (a CUcontext, or a CUgreenCtx).
  void succeeded(const void* handle);

 private:
  void reserve_further();

  DeviceState* device_ = nullptr;
  ContextProbe probe_;
  CUdevice dev_ = -1;
  ContextKind kind_ = ContextKind::Created;
  std::uint64_t reserved_ = 0;   // the measured footprint, reserved before creation
  std::uint64_t owed_ = 0;       // of it, what the context's first launch takes (launch_growth)
  std::uint64_t libraries_ = 0;  // the loaded libraries' globals (library_globals.h): in reserved_
                                 // for a further context, beside it for the first
  bool further_ = false;         // a further context: tracked by handle, given back at its destruction
  bool in_flight_ = false;       // counted as an allocation in flight (the reconciliation waits)
  bool looked_ = false;          // the driver's figure before the creation is known
  std::uint64_t before_ = 0;
  bool refused_ = false;
  bool done_ = false;
};

// What a further context reserves on this device: the largest footprint measured for one here.
std::uint64_t further_context_bytes(const DeviceState& d);
// The key a further context's charge is tracked under: its handle; the primary context of a device
// (whose handle may be reused when it is released and retained again) by an odd key of its own.
inline std::uint64_t context_key(ContextKind kind, const void* handle, CUdevice dev) {
  if (kind == ContextKind::Primary) return (static_cast<std::uint64_t>(static_cast<unsigned>(dev)) << 1) | 1;
  return reinterpret_cast<std::uintptr_t>(handle);
}
// Destroys a created or green context through `destroy`, giving back what its creation reserved.
template <class Destroy>
CUresult destroy_charged_context(ContextKind kind, const void* handle, Destroy&& destroy) {
  return release(kind == ContextKind::Green ? AllocKind::GreenContext : AllocKind::Context,
                 context_key(kind, handle, -1), destroy);
}
// The primary context released once more (cuDevicePrimaryCtxRelease): the last release destroys it
// and gives back what its creation reserved.
CUresult release_primary_context(CUdevice dev, CUresult (*release_fn)(CUdevice));

namespace context_books {
// In a forked child: it holds none of its parent's contexts.
void after_fork();
}  // namespace context_books

}  // namespace gpuslice::interposer
