// The background flusher thread: a flush every second, a drain of filling rings every 100 ms.
#pragma once

namespace gpuslice::profiler::detail {

// Once per process, and again in a forked child: the wake-up condition (on CLOCK_MONOTONIC).
void init_flusher_wakeup();
// With g_control_mutex held (or alone in a fork child).
void start_flusher();
void stop_flusher();

}  // namespace gpuslice::profiler::detail
