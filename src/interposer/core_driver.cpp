#include "interposer/core_driver.h"

namespace gpuslice::interposer {
namespace {
CoreDriver g_ops;  // installed by lifecycle (real_core_driver) or a test's simulation
}

const CoreDriver& core_driver() { return g_ops; }
void set_core_driver(const CoreDriver& ops) { g_ops = ops; }

}  // namespace gpuslice::interposer
