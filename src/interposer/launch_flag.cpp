#include "interposer/launch_flag.h"

namespace gpuslice::interposer {

std::atomic<bool> g_launch_gated{false};

}  // namespace gpuslice::interposer
