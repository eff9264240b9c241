// Reaching the real libcuda / libnvidia-ml: glibc's own dlsym, our handle of each library, and the
// lookup of symbols we do not hook.
#include "interposer/real_symbols.h"

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "common/log.h"

namespace gpuslice::interposer {

namespace {

std::atomic<void*> g_handles[2]{};
std::atomic<DlsymFn> g_real_dlsym{nullptr};

const char* library_soname(Library lib) {
  return lib == Library::Cuda ? "libcuda.so.1" : "libnvidia-ml.so.1";
}

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

void* real_unhooked(Library lib, const char* symbol) {
  void* h = library_handle(lib);
  DlsymFn dl = real_dlsym();
  if (h == nullptr || dl == nullptr) return nullptr;
  return dl(h, symbol);
}

}  // namespace gpuslice::interposer
