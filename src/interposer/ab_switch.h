// The in-process A/B switch of the overhead benchmark (bench/gpu/ab_overhead.py). Only the
// benchmark's build of the library, libgpuslice-ab.so, has it: there every driver function the
// routing hands out is a stub that jumps either to our hook or to the function the driver gave,
// as gpuslice_ab_set_bypass() says. Both sides pay the same stub, so alternating them in one
// process measures exactly what the hook adds. The production library hands out the hooks.
#pragma once

#include <cstddef>

#include "interposer/hooks.h"

namespace gpuslice::interposer {

#if defined(GPUSLICE_AB_SWITCH)
void* ab_switch_stub(std::size_t hook, void* driver_function);
inline void* handed_out(std::size_t hook, void* driver_function) {
  return ab_switch_stub(hook, driver_function);
}
#else
inline void* handed_out(std::size_t hook, void* /*driver_function*/) { return kHooks[hook].hook; }
#endif

}  // namespace gpuslice::interposer
