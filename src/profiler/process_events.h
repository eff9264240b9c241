// What the profiler does on the process's fork and exit, installed with the first start().
#pragma once

namespace gpuslice::profiler::detail {

// With g_control_mutex held; later calls do nothing.
void install_process_hooks_once();

}  // namespace gpuslice::profiler::detail
