// Path 2 of 3 to the driver: programs that dlopen libcuda.so.1 / libnvidia-ml.so.1 and dlsym
// functions (PyTorch's NVRTC paths, Triton, nvidia-smi). A lookup that would return the real
// library's address of a hooked symbol returns our hook instead.
#include <dlfcn.h>

#include "interposer/ab_switch.h"
#include "interposer/hooks.h"
#include "interposer/real_symbols.h"

namespace gpuslice::interposer {

// No thread-local state here: a sanitizer runtime calls dlsym while it starts, before it can serve
// __tls_get_addr. Re-entry is bounded anyway: real_address() may dlopen the driver, whose
// constructors may call dlsym again, but a nested dlopen of a library already being loaded returns
// at once.
void* route_dlsym(void* handle, const char* name) {
  DlsymFn real = real_dlsym();
  if (real == nullptr) return nullptr;
  void* p = real(handle, name);
  if (p == nullptr) return p;
  int idx = find_hook(name);
  if (idx < 0) return p;
  const HookDescriptor& d = kHooks[idx];
  if (p == d.hook) return p;
  // Only the real driver's symbol is swapped: a same-named function of another library (a second
  // copy of the driver loaded on purpose, a wrapper) is left alone.
  return is_real_address(static_cast<HookId>(idx), p) ? handed_out(static_cast<std::size_t>(idx), p) : p;
}

}  // namespace gpuslice::interposer

extern "C" __attribute__((visibility("hidden"), used)) void* gpuslice_route_dlsym(void* handle,
                                                                                  const char* name) {
  return gpuslice::interposer::route_dlsym(handle, name);
}

extern "C" __attribute__((visibility("hidden"), used)) void* gpuslice_real_dlsym_address() {
  return reinterpret_cast<void*>(gpuslice::interposer::real_dlsym());
}

// The exported dlsym (unversioned, so it also binds references to every glibc version of dlsym:
// GLIBC_2.34, GLIBC_2.2.5 on x86-64, GLIBC_2.17 on aarch64). RTLD_NEXT means "after the caller's object", and
// glibc finds the caller from its return address: a C++ override would make every RTLD_NEXT lookup relative
// to libgpuslice.so (a sanitizer or another interposer asking for "the next mmap" would get its own wrapper
// back). So RTLD_NEXT jumps straight into glibc's dlsym with the caller's return address still on the stack;
// every other lookup goes through route_dlsym.
#if defined(__x86_64__)
asm(R"(
    .text
    .globl dlsym
    .type dlsym, @function
dlsym:
    cmpq $-1, %rdi
    jne 1f
    pushq %rdi
    pushq %rsi
    subq $8, %rsp
    call gpuslice_real_dlsym_address
    addq $8, %rsp
    popq %rsi
    popq %rdi
    testq %rax, %rax
    jz 2f
    jmp *%rax
1:
    jmp gpuslice_route_dlsym
2:
    ret
    .size dlsym, .-dlsym
)");
#elif defined(__aarch64__)
// Same on aarch64, where the return address is the link register x30: it is saved around the call
// that finds glibc's dlsym and restored before the tail branch. x16 (IP0) holds the target because
// the procedure-call standard leaves it free at a branch, and a BTI landing pad accepts it.
asm(R"(
    .text
    .globl dlsym
    .type dlsym, %function
    .p2align 2
dlsym:
    cmn x0, #1
    b.ne 1f
    stp x29, x30, [sp, #-32]!
    mov x29, sp
    stp x0, x1, [sp, #16]
    bl gpuslice_real_dlsym_address
    mov x16, x0
    ldp x0, x1, [sp, #16]
    ldp x29, x30, [sp], #32
    cbz x16, 2f
    br x16
1:
    b gpuslice_route_dlsym
2:
    mov x0, #0
    ret
    .size dlsym, .-dlsym
)");
#else
#error "dlsym override: the RTLD_NEXT tail-jump exists for x86-64 and aarch64; add one for this architecture"
#endif
