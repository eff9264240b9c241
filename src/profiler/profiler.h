// Per-API profiler (SPEC §5): Alnair-compatible metrics.log and timeline.log. Hooks call record()
// only when g_enabled is set; record() appends to a per-thread ring buffer with no lock and no
// allocation after the thread's first event. A background flusher writes the files periodically,
// at exit and on SIGTERM; a full ring drops events and counts the drops.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace gpuslice::profiler {

extern std::atomic<bool> g_enabled;

// Starts profiling into `dir` (created if missing). `api_names[id]` names the API with that id, as
// it appears in the files ("cuMemAlloc", "cuMemcpyH2D", ...). Returns false and logs on failure.
bool start(const char* dir, const char* const* api_names, std::size_t api_count);

// One call of API `api_id` that began at `start_epoch_ns` (CLOCK_REALTIME) and took `duration_ns`.
void record(std::uint16_t api_id, std::uint64_t start_epoch_ns, std::uint64_t duration_ns);

// Writes everything recorded so far (metrics.log is rewritten whole, timeline.log appended).
void flush();
// Final flush; stops the background flusher. Safe to call more than once.
void stop();

std::uint64_t dropped_events();

}  // namespace gpuslice::profiler
