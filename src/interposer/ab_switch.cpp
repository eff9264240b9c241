// Stubs of the benchmark's A/B switch (ab_switch.h): one per hooked driver function, x86-64 only
// (the benchmark machines are).
#include "interposer/ab_switch.h"

#include <cstdlib>

#if !defined(__x86_64__)
#error "the A/B switch of the overhead benchmark is x86-64 only"
#endif

extern "C" {
__attribute__((visibility("hidden"))) volatile unsigned char gs_ab_bypass = 0;
#define GS_AB_SLOTS(sym, base, since, variant, profile)                     \
  __attribute__((visibility("hidden"))) void* gs_ab_hook_##sym = nullptr;   \
  __attribute__((visibility("hidden"))) void* gs_ab_driver_##sym = nullptr; \
  __attribute__((visibility("hidden"))) void gs_ab_stub_##sym();
GPUSLICE_CUDA_HOOKS(GS_AB_SLOTS)
#undef GS_AB_SLOTS

// 1 routes every handed-out function straight to the driver, 0 through our hooks.
__attribute__((visibility("default"))) void gpuslice_ab_set_bypass(int bypass) { gs_ab_bypass = bypass != 0; }
}

// NOLINTBEGIN(cppcoreguidelines-macro-usage)
#define GS_AB_STUB(sym, base, since, variant, profile)                                            \
  asm(".text\n.hidden gs_ab_stub_" #sym "\n.type gs_ab_stub_" #sym ",@function\ngs_ab_stub_" #sym \
      ":\n  cmpb $0, gs_ab_bypass(%rip)\n  jne 1f\n  jmp *gs_ab_hook_" #sym                       \
      "(%rip)\n1:\n  jmp *gs_ab_driver_" #sym "(%rip)\n.size gs_ab_stub_" #sym ",.-gs_ab_stub_" #sym "\n");
GPUSLICE_CUDA_HOOKS(GS_AB_STUB)
#undef GS_AB_STUB
// NOLINTEND(cppcoreguidelines-macro-usage)

namespace gpuslice::interposer {
namespace {

struct AbSlot {
  void** hook;
  void** driver;
  void (*stub)();
};

const AbSlot kAbSlots[] = {
#define GS_AB_ROW(sym, base, since, variant, profile) \
  {&gs_ab_hook_##sym, &gs_ab_driver_##sym, &gs_ab_stub_##sym},
    GPUSLICE_CUDA_HOOKS(GS_AB_ROW)
#undef GS_AB_ROW
};

}  // namespace

void* ab_switch_stub(std::size_t hook, void* driver_function) {
  // The side a process starts on; the benchmark flips it with gpuslice_ab_set_bypass().
  static const bool initial = [] {
    const char* start = std::getenv("GPUSLICE_AB_BYPASS");
    if (start != nullptr && start[0] == '1') gs_ab_bypass = 1;
    return true;
  }();
  (void)initial;
  // The CUDA hooks come first in the hook table, NVML ones after: those are handed out as hooks.
  if (hook >= sizeof kAbSlots / sizeof kAbSlots[0] || driver_function == nullptr) return kHooks[hook].hook;
  const AbSlot& slot = kAbSlots[hook];
  *slot.hook = kHooks[hook].hook;
  // Bypass calls the first function the driver gave for this entry point (it gives one per symbol).
  void* expected = nullptr;
  __atomic_compare_exchange_n(slot.driver, &expected, driver_function, false, __ATOMIC_ACQ_REL,
                              __ATOMIC_ACQUIRE);
  return reinterpret_cast<void*>(slot.stub);
}

}  // namespace gpuslice::interposer
