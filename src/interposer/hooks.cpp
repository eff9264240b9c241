// The hook table (hooks.h): one descriptor per hooked symbol, and the real library's function behind
// each hook, resolved lazily through our own handle of the library (real_symbols.h).
#include "interposer/hooks.h"

#include <array>
#include <atomic>
#include <cstring>

#include "common/log.h"

namespace gpuslice::interposer {

const HookDescriptor kHooks[kHookCount] = {
#define GS_CUDA_ROW(sym, base, since, variant, profile) \
  {#sym, #base, since, StreamVariant::variant, Library::Cuda, profile, reinterpret_cast<void*>(&::sym)},
#define GS_NVML_ROW(sym, base, since, variant, profile) \
  {#sym, #base, since, StreamVariant::variant, Library::Nvml, profile, reinterpret_cast<void*>(&::sym)},
    GPUSLICE_CUDA_HOOKS(GS_CUDA_ROW) GPUSLICE_NVML_HOOKS(GS_NVML_ROW)
#undef GS_CUDA_ROW
#undef GS_NVML_ROW
};

namespace {
std::array<std::atomic<void*>, kHookCount> g_real{};
}  // namespace

void* real_address(HookId id) {
  auto idx = static_cast<std::size_t>(id);
  void* p = g_real[idx].load(std::memory_order_acquire);
  if (p != nullptr) [[likely]]
    return p;
  void* h = library_handle(kHooks[idx].library);
  DlsymFn dl = real_dlsym();
  if (h == nullptr || dl == nullptr) return nullptr;
  p = dl(h, kHooks[idx].symbol);
  if (p == kHooks[idx].hook) p = nullptr;  // never forward to ourselves
  if (p != nullptr) g_real[idx].store(p, std::memory_order_release);
  return p;
}

bool is_real_address(HookId id, void* p) { return p != nullptr && real_address(id) == p; }

int find_hook(const char* symbol) {
  if (symbol == nullptr || (symbol[0] != 'c' && symbol[0] != 'n')) return -1;
  for (std::size_t i = 0; i < kHookCount; ++i) {
    if (std::strcmp(kHooks[i].symbol, symbol) == 0) return static_cast<int>(i);
  }
  return -1;
}

namespace {
constexpr const char* kProfileNames[kHookCount] = {
#define GS_PROFILE_NAME(sym, base, since, variant, profile) profile,
    GPUSLICE_CUDA_HOOKS(GS_PROFILE_NAME) GPUSLICE_NVML_HOOKS(GS_PROFILE_NAME)
#undef GS_PROFILE_NAME
};

// Whether two names are the same, stopping at the first difference (no length first): the table
// below is computed by the compiler, whose evaluation steps are bounded (clang's: about a million).
constexpr bool same_name(const char* a, const char* b) {
  while (*a != '\0' && *a == *b) {
    ++a;
    ++b;
  }
  return *a == *b;
}

// Hooks that share a profile name (cuMemAlloc_v2 and friends) report as one API: the id of the
// first row with that name, found among the first rows of the names before it. Computed at
// compile time.
constexpr std::array<std::uint16_t, kHookCount> kProfileIds = [] {
  std::array<std::uint16_t, kHookCount> ids{};
  for (std::size_t i = 0; i < kHookCount; ++i) {
    ids[i] = static_cast<std::uint16_t>(i);
    for (std::size_t j = 0; j < i; ++j) {
      if (ids[j] == j && same_name(kProfileNames[j], kProfileNames[i])) {
        ids[i] = static_cast<std::uint16_t>(j);
        break;
      }
    }
  }
  return ids;
}();
}  // namespace

std::uint16_t profile_id(HookId id) { return kProfileIds[static_cast<std::size_t>(id)]; }

CUresult missing_cuda_function() {
  if (library_handle(Library::Cuda) != nullptr) return CUDA_ERROR_NOT_FOUND;
  static std::atomic<bool> logged{false};
  if (!logged.exchange(true)) GS_LOG(Error, "libcuda.so.1 could not be loaded: no driver");
  return CUDA_ERROR_NOT_INITIALIZED;
}

nvmlReturn_t missing_nvml_function() {
  return library_handle(Library::Nvml) != nullptr ? NVML_ERROR_FUNCTION_NOT_FOUND
                                                  : NVML_ERROR_DRIVER_NOT_LOADED;
}

}  // namespace gpuslice::interposer
