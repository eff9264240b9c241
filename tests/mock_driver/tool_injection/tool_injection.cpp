// A stand-in for a profiler's CUDA injection library, shaped like the one Nsight Compute preloads
// (libcuda-injection.so): it carries the driver's soname, so a later dlopen("libcuda.so.1") returns
// it, it exports every driver entry point as a jump to the real driver, and its cuGetProcAddress
// hands out the real driver's own functions. The real driver is loaded by path from
// GPUSLICE_TOOL_REAL_DRIVER. Used by the end-to-end tests of quotas under profilers.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

// Every exported entry point: one slot filled at load time, one trampoline that jumps through it.
extern "C" {
#define GS_TOOL_SLOT(name) __attribute__((visibility("hidden"))) void* gs_tool_slot_##name = nullptr;
#include "tool_symbols.inc"
#undef GS_TOOL_SLOT
}

#if defined(__x86_64__)
#define GS_TOOL_JUMP(name)                                         \
  asm(".text\n.globl " #name "\n.type " #name ",@function\n" #name \
      ":\n"                                                        \
      "  jmp *gs_tool_slot_" #name "(%rip)\n.size " #name ",.-" #name "\n");
#elif defined(__aarch64__)
#define GS_TOOL_JUMP(name)                                                             \
  asm(".text\n.globl " #name "\n.type " #name ",%function\n" #name                     \
      ":\n"                                                                            \
      "  adrp x16, gs_tool_slot_" #name "\n  ldr x16, [x16, :lo12:gs_tool_slot_" #name \
      "]\n"                                                                            \
      "  br x16\n.size " #name ",.-" #name "\n");
#else
#error "tool injection stand-in: no trampoline for this architecture"
#endif
#define GS_TOOL_SLOT(name) GS_TOOL_JUMP(name)
#include "tool_symbols.inc"
#undef GS_TOOL_SLOT

namespace {

__attribute__((constructor)) void load_real_driver() {
  const char* path = std::getenv("GPUSLICE_TOOL_REAL_DRIVER");
  void* real = path != nullptr ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
  if (real == nullptr) {
    std::fprintf(stderr, "tool injection: cannot load the real driver '%s': %s\n", path ? path : "(unset)",
                 dlerror());
    std::abort();
  }
#define GS_TOOL_SLOT(name) gs_tool_slot_##name = dlsym(real, #name);
#include "tool_symbols.inc"
#undef GS_TOOL_SLOT
}

}  // namespace
