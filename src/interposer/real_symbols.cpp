// The hook descriptor table and lazy resolution of real driver functions.
#include "interposer/real_symbols.h"

#include <dlfcn.h>
#include <link.h>

#include <array>
#include <cstring>
#include <string_view>

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
std::atomic<void*> g_handles[2]{};
std::atomic<DlsymFn> g_real_dlsym{nullptr};

const char* library_soname(Library lib) {
  return lib == Library::Cuda ? "libcuda.so.1" : "libnvidia-ml.so.1";
}

}  // namespace

namespace {

bool ends_with(const char* s, const char* suffix) {
  std::size_t n = 0, m = 0;
  while (s[n] != '\0') ++n;
  while (suffix[m] != '\0') ++m;
  if (m > n) return false;
  for (std::size_t i = 0; i < m; ++i)
    if (s[n - m + i] != suffix[i]) return false;
  return true;
}

bool same(const char* a, const char* b) {
  while (*a != '\0' && *a == *b) ++a, ++b;
  return *a == *b;
}

// Looks `name` up in a loaded object's own dynamic symbol table through its GNU hash table, with
// no call into the dynamic loader: this runs while a sanitizer runtime is still starting (it asks
// our dlsym for the functions it intercepts), when dlsym/dlvsym cannot be used yet.
void* lookup_in_object(const link_map* m, const char* name) {
  const ElfW(Sym)* symtab = nullptr;
  const char* strtab = nullptr;
  const std::uint32_t* gnu_hash = nullptr;
  auto addr = [m](ElfW(Addr) p) { return p < m->l_addr ? p + m->l_addr : p; };  // relocated or not
  for (const ElfW(Dyn)* d = m->l_ld; d != nullptr && d->d_tag != DT_NULL; ++d) {
    if (d->d_tag == DT_SYMTAB) symtab = reinterpret_cast<const ElfW(Sym)*>(addr(d->d_un.d_ptr));
    if (d->d_tag == DT_STRTAB) strtab = reinterpret_cast<const char*>(addr(d->d_un.d_ptr));
    if (d->d_tag == DT_GNU_HASH) gnu_hash = reinterpret_cast<const std::uint32_t*>(addr(d->d_un.d_ptr));
  }
  if (symtab == nullptr || strtab == nullptr || gnu_hash == nullptr) return nullptr;
  std::uint32_t h = 5381;
  for (const char* c = name; *c != '\0'; ++c) h = h * 33 + static_cast<unsigned char>(*c);
  const std::uint32_t nbuckets = gnu_hash[0], symoffset = gnu_hash[1], bloom_size = gnu_hash[2];
  const auto* buckets = gnu_hash + 4 + bloom_size * (sizeof(ElfW(Addr)) / 4);
  const std::uint32_t* chain = buckets + nbuckets;
  std::uint32_t idx = buckets[h % nbuckets];
  if (idx < symoffset) return nullptr;
  for (;; ++idx) {
    std::uint32_t h2 = chain[idx - symoffset];
    const ElfW(Sym)& sym = symtab[idx];
    if ((h | 1) == (h2 | 1) && sym.st_value != 0 && same(strtab + sym.st_name, name))
      return reinterpret_cast<void*>(m->l_addr + sym.st_value);
    if ((h2 & 1) != 0) return nullptr;
  }
}

}  // namespace

DlsymFn real_dlsym() {
  DlsymFn fn = g_real_dlsym.load(std::memory_order_acquire);
  if (fn != nullptr) return fn;
  // glibc's own dlsym, from libc (glibc >= 2.34) or libdl (older). Not dlvsym(RTLD_NEXT): another
  // library that interposes dlsym (a sanitizer runtime, another preload) may come next in line.
  void* p = nullptr;
  for (const link_map* m = _r_debug.r_map; m != nullptr && p == nullptr; m = m->l_next) {
    if (m->l_name != nullptr && (ends_with(m->l_name, "libc.so.6") || ends_with(m->l_name, "libdl.so.2")))
      p = lookup_in_object(m, "dlsym");
  }
  if (p == nullptr) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (p == nullptr) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  fn = reinterpret_cast<DlsymFn>(p);
  g_real_dlsym.store(fn, std::memory_order_release);
  return fn;
}

void* library_handle(Library lib) {
  auto& slot = g_handles[static_cast<int>(lib)];
  void* h = slot.load(std::memory_order_acquire);
  if (h != nullptr) return h;
  // No once-flag: dlopen may run constructors that call back into dlsym (and so into us); a nested
  // or concurrent caller simply takes another reference, which is harmless.
  h = dlopen(library_soname(lib), RTLD_LAZY | RTLD_LOCAL);
  if (h == nullptr) {
    GS_LOG(Debug, "cannot load %s: %s", library_soname(lib), dlerror());
    return nullptr;
  }
  void* expected = nullptr;
  if (!slot.compare_exchange_strong(expected, h, std::memory_order_acq_rel)) return expected;
  return h;
}

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

void* real_unhooked(Library lib, const char* symbol) {
  void* h = library_handle(lib);
  DlsymFn dl = real_dlsym();
  if (h == nullptr || dl == nullptr) return nullptr;
  return dl(h, symbol);
}

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

// Hooks that share a profile name (cuMemAlloc_v2 and friends) report as one API: the id of the
// first row with that name. Computed at compile time.
constexpr std::array<std::uint16_t, kHookCount> kProfileIds = [] {
  std::array<std::uint16_t, kHookCount> ids{};
  for (std::size_t i = 0; i < kHookCount; ++i) {
    ids[i] = static_cast<std::uint16_t>(i);
    for (std::size_t j = 0; j < i; ++j) {
      if (std::string_view(kProfileNames[j]) == kProfileNames[i]) {
        ids[i] = static_cast<std::uint16_t>(j);
        break;
      }
    }
  }
  return ids;
}();
}  // namespace

std::uint16_t profile_id(HookId id) { return kProfileIds[static_cast<std::size_t>(id)]; }

}  // namespace gpuslice::interposer

namespace gpuslice::interposer {

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
