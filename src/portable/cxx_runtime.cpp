// The parts of the C++ runtime that the injected libraries use, so that they link neither
// libstdc++ nor the unwinder (docs/portability.md). Everything here is hidden: the host process
// keeps its own runtime, whatever version it is. Containers are header-only templates; what they
// call out of line is defined below. A use of anything else fails the link (--no-undefined). The
// libraries' version scripts keep all of it local (the C++ declarations in the standard headers
// carry default visibility, so the attribute cannot be repeated here).
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <unordered_map>

#define GPUSLICE_RUNTIME_API __attribute__((visibility("hidden")))

namespace {

// No exceptions: what would have thrown ends the process with a message, as an uncaught exception
// would have, instead of unwinding into the host application's frames.
[[noreturn]] void fail(const char* what) {
  static const char kPrefix[] = "gpuslice: fatal: ";
  (void)!write(STDERR_FILENO, kPrefix, sizeof(kPrefix) - 1);
  (void)!write(STDERR_FILENO, what, strlen(what));
  (void)!write(STDERR_FILENO, "\n", 1);
  abort();
}

void* allocate(std::size_t size) {
  void* p = malloc(size == 0 ? 1 : size);
  if (p == nullptr) fail("out of memory");
  return p;
}

void* allocate_aligned(std::size_t size, std::size_t alignment) {
  void* p = nullptr;
  if (posix_memalign(&p, alignment < sizeof(void*) ? sizeof(void*) : alignment, size == 0 ? 1 : size) != 0) {
    return nullptr;
  }
  return p;
}

}  // namespace

void* operator new(std::size_t size) { return allocate(size); }
void* operator new[](std::size_t size) { return allocate(size); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept { return malloc(size == 0 ? 1 : size); }
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  return malloc(size == 0 ? 1 : size);
}
void* operator new(std::size_t size, std::align_val_t alignment) {
  void* p = allocate_aligned(size, static_cast<std::size_t>(alignment));
  if (p == nullptr) fail("out of memory");
  return p;
}
void* operator new[](std::size_t size, std::align_val_t alignment) { return operator new(size, alignment); }
void* operator new(std::size_t size, std::align_val_t alignment, const std::nothrow_t&) noexcept {
  return allocate_aligned(size, static_cast<std::size_t>(alignment));
}
void* operator new[](std::size_t size, std::align_val_t alignment, const std::nothrow_t&) noexcept {
  return allocate_aligned(size, static_cast<std::size_t>(alignment));
}
void operator delete(void* p) noexcept { free(p); }
void operator delete[](void* p) noexcept { free(p); }
void operator delete(void* p, std::size_t) noexcept { free(p); }
void operator delete[](void* p, std::size_t) noexcept { free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { free(p); }
void operator delete(void* p, std::align_val_t) noexcept { free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { free(p); }

namespace std {
const nothrow_t nothrow{};

void __throw_bad_alloc() { fail("out of memory"); }
void __throw_bad_array_new_length() { fail("bad array new length"); }
void __throw_logic_error(const char* what) { fail(what); }
void __throw_length_error(const char* what) { fail(what); }
void __throw_out_of_range(const char* what) { fail(what); }
void __throw_out_of_range_fmt(const char* what, ...) { fail(what); }
void __throw_invalid_argument(const char* what) { fail(what); }
void __throw_system_error(int) { fail("system error"); }
void __throw_bad_function_call() { fail("bad function call"); }
void __throw_bad_optional_access() { fail("bad optional access"); }

namespace __detail {

// Bucket counts for std::unordered_map: the smallest prime >= n, so that identity hashes of
// integers and pointers spread over the buckets.
std::size_t _Prime_rehash_policy::_M_next_bkt(std::size_t n) const {
  std::size_t candidate = n < 2 ? 2 : n;
  for (;; ++candidate) {
    bool prime = true;
    for (std::size_t d = 2; d * d <= candidate; ++d) {
      if (candidate % d == 0) {
        prime = false;
        break;
      }
    }
    if (prime) break;
  }
  _M_next_resize = static_cast<std::size_t>(static_cast<double>(candidate) * _M_max_load_factor);
  return candidate;
}

// Whether inserting n_ins elements into n_elt elements over n_bkt buckets exceeds the maximum load
// factor, and if so the new bucket count (at least double, so that growth stays amortized O(1)).
std::pair<bool, std::size_t> _Prime_rehash_policy::_M_need_rehash(std::size_t n_bkt, std::size_t n_elt,
                                                                  std::size_t n_ins) const {
  if (n_elt + n_ins <= _M_next_resize) return {false, 0};
  double min_bkts = static_cast<double>(n_elt + n_ins) / static_cast<double>(_M_max_load_factor);
  if (min_bkts >= static_cast<double>(n_bkt)) {
    std::size_t wanted = static_cast<std::size_t>(min_bkts) + 1;
    if (wanted < n_bkt * 2) wanted = n_bkt * 2;
    return {true, _M_next_bkt(wanted)};
  }
  _M_next_resize = static_cast<std::size_t>(static_cast<double>(n_bkt) * _M_max_load_factor);
  return {false, 0};
}

}  // namespace __detail
}  // namespace std

// Thread-safe initialization of function-local statics. Byte 0 of the guard is the "done" flag the
// compiler tests inline; byte 1 marks an initialization in progress on some thread.
extern "C" {

GPUSLICE_RUNTIME_API int __cxa_guard_acquire(std::uint64_t* guard) {
  auto* bytes = reinterpret_cast<unsigned char*>(guard);
  for (;;) {
    if (__atomic_load_n(&bytes[0], __ATOMIC_ACQUIRE) != 0) return 0;
    unsigned char expected = 0;
    if (__atomic_compare_exchange_n(&bytes[1], &expected, 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
      if (__atomic_load_n(&bytes[0], __ATOMIC_ACQUIRE) != 0) {
        __atomic_store_n(&bytes[1], 0, __ATOMIC_RELEASE);
        return 0;
      }
      return 1;
    }
    sched_yield();
  }
}

GPUSLICE_RUNTIME_API void __cxa_guard_release(std::uint64_t* guard) {
  auto* bytes = reinterpret_cast<unsigned char*>(guard);
  __atomic_store_n(&bytes[0], 1, __ATOMIC_RELEASE);
  __atomic_store_n(&bytes[1], 0, __ATOMIC_RELEASE);
}

GPUSLICE_RUNTIME_API void __cxa_guard_abort(std::uint64_t* guard) {
  __atomic_store_n(&reinterpret_cast<unsigned char*>(guard)[1], 0, __ATOMIC_RELEASE);
}

GPUSLICE_RUNTIME_API void __cxa_pure_virtual() { fail("pure virtual function called"); }
GPUSLICE_RUNTIME_API void __cxa_deleted_virtual() { fail("deleted virtual function called"); }

// Parts of the library are compiled with RTTI, so the type_info objects of their polymorphic
// classes point at these vtables. Only dynamic_cast, typeid of a polymorphic object and exception
// matching ever read through them, and those need runtime functions that are absent here, so using
// one fails the link; the vtables themselves only have to exist.
extern GPUSLICE_RUNTIME_API const void* const gpuslice_class_type_info_vtable[8] __asm__(
    "_ZTVN10__cxxabiv117__class_type_infoE") = {};
extern GPUSLICE_RUNTIME_API const void* const gpuslice_si_class_type_info_vtable[8] __asm__(
    "_ZTVN10__cxxabiv120__si_class_type_infoE") = {};
extern GPUSLICE_RUNTIME_API const void* const gpuslice_vmi_class_type_info_vtable[8] __asm__(
    "_ZTVN10__cxxabiv121__vmi_class_type_infoE") = {};
}
