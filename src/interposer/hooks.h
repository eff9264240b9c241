// What every hook file needs: hook ids and descriptors generated from hook_table.h, access to the
// real driver function (hooks.cpp, through real_symbols.h), and the profiling scope. The hook functions
// themselves are the exported C symbols, defined one API family per file.
#pragma once

#include <atomic>
#include <cstdint>

#include "abi/cuda_abi.h"
#include "abi/nvml_abi.h"
#include "common/clock.h"
#include "interposer/hook_table.h"
#include "interposer/real_symbols.h"
#include "profiler/profiler.h"

#define GS_EXPORT extern "C" __attribute__((visibility("default")))

namespace gpuslice::interposer {

// Which per-thread-default-stream flavour of a driver symbol this is (cuGetProcAddress flags).
enum class StreamVariant : std::uint8_t { Plain, Ptsz, Ptds };

enum class HookId : std::uint16_t {
#define GS_HOOK_ID(sym, base, since, variant, profile) sym,
  GPUSLICE_CUDA_HOOKS(GS_HOOK_ID) GPUSLICE_NVML_HOOKS(GS_HOOK_ID)
#undef GS_HOOK_ID
      Count
};
inline constexpr std::size_t kHookCount = static_cast<std::size_t>(HookId::Count);

struct HookDescriptor {
  const char* symbol;      // exported name in the real library and in ours
  const char* base;        // name as cuGetProcAddress is asked for it
  int since_cuda_version;  // first cudaVersion that resolves `base` to this symbol
  StreamVariant variant;
  Library library;
  const char* profile_name;  // name in metrics.log / timeline.log
  void* hook;                // our replacement
};

extern const HookDescriptor kHooks[kHookCount];

// Index of `symbol` in kHooks, or -1. Lock-free, allocation-free (used inside dlsym).
int find_hook(const char* symbol);

// The real library's function for a hook, resolved lazily from our own handle of libcuda.so.1 /
// libnvidia-ml.so.1 (never from the global scope, where our own export would be found).
void* real_address(HookId id);

// True if `p` is the real library's address of hook `id` (pointer identity, resolved lazily).
bool is_real_address(HookId id, void* p);

template <HookId id, class Fn>
Fn real_function() {
  return reinterpret_cast<Fn>(real_address(id));
}

// The answer of a hook whose real function is missing: the library could not be loaded at all
// (CUDA_ERROR_NOT_INITIALIZED, logged once) or this driver lacks the symbol (CUDA_ERROR_NOT_FOUND).
CUresult missing_cuda_function();
nvmlReturn_t missing_nvml_function();

// The profile id of a hook (hooks sharing a profile name share an id).
std::uint16_t profile_id(HookId id);

// Times one hooked call when the profiler is on; costs one relaxed load when it is off.
class ProfileScope {
 public:
  explicit ProfileScope(HookId id) {
    if (profiler::g_enabled.load(std::memory_order_relaxed)) {
      id_ = id;
      start_epoch_ns_ = realtime_ns();
      start_ns_ = monotonic_ns();
    }
  }
  ~ProfileScope() {
    if (start_ns_ != 0) profiler::record(profile_id(id_), start_epoch_ns_, monotonic_ns() - start_ns_);
  }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  HookId id_{};
  std::uint64_t start_epoch_ns_ = 0;
  std::uint64_t start_ns_ = 0;
};

}  // namespace gpuslice::interposer

// The real function behind a hook, typed by the declared prototype: REAL(cuMemAlloc_v2)(...).
#define REAL(sym) \
  (::gpuslice::interposer::real_function<::gpuslice::interposer::HookId::sym, decltype(&::sym)>())
