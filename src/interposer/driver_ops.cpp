#include "interposer/driver_ops.h"

namespace gpuslice::interposer {
namespace {
DriverOps g_ops;  // installed by lifecycle (real_driver_ops) or a test's simulation
}

const DriverOps& driver_ops() { return g_ops; }
void set_driver_ops(const DriverOps& ops) { g_ops = ops; }

}  // namespace gpuslice::interposer
