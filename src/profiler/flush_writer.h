// Flushing: the rings drained into timeline.log, the totals into the metrics files.
#pragma once

namespace gpuslice::profiler::detail {

// With g_flush_mutex held. From a signal handler `in_signal` is set: rings are not freed then,
// because free() is not async-signal-safe (their totals are still counted, from the list).
void flush_locked(bool in_signal);
// Takes g_flush_mutex and flushes when a session runs.
void flush_if_running(bool in_signal);
// Drains only rings that are a quarter full, so bursts of short calls are not dropped between
// one-second flushes.
void drain_filling_rings();

}  // namespace gpuslice::profiler::detail
