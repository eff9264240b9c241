// SIGTERM/SIGINT: a final flush before the process dies the way it would have died without us.
#pragma once

namespace gpuslice::profiler::detail {

// Only where the application left the default disposition.
void install_signal_handlers();
// Back to the default, unless the application installed its own handler since.
void restore_signal_handlers();

}  // namespace gpuslice::profiler::detail
