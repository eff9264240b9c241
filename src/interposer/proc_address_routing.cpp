// Which function cuGetProcAddress hands out for a driver entry point: our hook when the driver's
// answer is the real address of a hooked symbol (pointer identity covers every version and
// _ptsz/_ptds variant), else by the exported symbol's own name, else by the name/version rule of
// the hook table for an address with no symbol of its own.
#include "interposer/proc_address_routing.h"

#include <dlfcn.h>

#include <cstring>

#include "common/log.h"
#include "interposer/ab_switch.h"
#include "interposer/hooks.h"
#include "interposer/real_symbols.h"

namespace gpuslice::interposer {

namespace {

// Highest-versioned hook whose base name is `symbol` and that `cuda_version` can see, preferring
// the per-thread-stream variant when the caller asked for it.
int hook_by_rule(const char* symbol, int cuda_version, cuuint64_t flags) {
  bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  int best = -1;
  int best_score = -1;
  for (std::size_t i = 0; i < kHookCount; ++i) {
    const HookDescriptor& d = kHooks[i];
    if (d.library != Library::Cuda || std::strcmp(d.base, symbol) != 0) continue;
    if (d.since_cuda_version > cuda_version) continue;
    bool variant_ok = per_thread || d.variant == StreamVariant::Plain;
    if (!variant_ok) continue;
    // Prefer the matching stream flavour, then the newest version.
    int score = d.since_cuda_version * 2 + ((d.variant != StreamVariant::Plain) == per_thread ? 1 : 0);
    if (score > best_score) {
      best_score = score;
      best = static_cast<int>(i);
    }
  }
  return best;
}

}  // namespace

void* route_proc_address(const char* symbol, void* real_pfn, int cuda_version, cuuint64_t flags) {
  if (real_pfn == nullptr || symbol == nullptr) return real_pfn;
  GS_LOG(Trace, "cuGetProcAddress request %s cudaVersion=%d flags=%llu", symbol, cuda_version,
         static_cast<unsigned long long>(flags));
  for (std::size_t i = 0; i < kHookCount; ++i) {
    if (kHooks[i].library == Library::Cuda && is_real_address(static_cast<HookId>(i), real_pfn)) {
      GS_LOG(Trace, "cuGetProcAddress(%s, %d, %llu) -> hook %s", symbol, cuda_version,
             static_cast<unsigned long long>(flags), kHooks[i].symbol);
      return handed_out(i, real_pfn);
    }
  }
  // An exported function is known by its own name. A hooked name is hooked even when the address
  // is not the one we forward to: a profiler's injection library (Nsight Compute preloads one under
  // the driver's soname, exporting every entry point) becomes "the driver" for our lookups, while
  // the driver's cuGetProcAddress keeps handing out its own functions. An exported symbol we do
  // not hook (cuCtxCreate_v3, say) is passed through untouched. Only an address with no symbol of
  // its own is matched by the requested name, since then we cannot tell its version.
  Dl_info info{};
  if (dladdr(real_pfn, &info) != 0 && info.dli_saddr == real_pfn && info.dli_sname != nullptr) {
    int idx = find_hook(info.dli_sname);
    if (idx < 0 || kHooks[idx].library != Library::Cuda || real_address(static_cast<HookId>(idx)) == nullptr)
      return real_pfn;
    GS_LOG(Debug, "cuGetProcAddress(%s): the driver's own %s, not the one we forward to; hooked", symbol,
           info.dli_sname);
    return handed_out(static_cast<std::size_t>(idx), real_pfn);
  }
  int idx = hook_by_rule(symbol, cuda_version, flags);
  if (idx >= 0 && real_address(static_cast<HookId>(idx)) != nullptr) {
    GS_LOG(Debug, "cuGetProcAddress(%s, %d): driver returned an unexported address; routed by name to %s",
           symbol, cuda_version, kHooks[idx].symbol);
    return handed_out(static_cast<std::size_t>(idx), real_pfn);
  }
  return real_pfn;
}

}  // namespace gpuslice::interposer
