// Per-API profiler (docs/profiling.md): Alnair-compatible metrics.log and timeline.log. Hooks call record()
// only when g_enabled is set; record() appends to a per-thread ring buffer with no lock and no
// allocation after the thread's first event. A background flusher writes the files periodically,
// at exit and on SIGTERM; a full ring drops events and counts the drops.
//
// Files in the profile directory (docs/profiling.md has the details):
//   metrics.log        totals of every process that profiled into the directory (Alnair format)
//   metrics.<pid>.log  this process's own totals, same format (metrics.log is their sum)
//   timeline.log       one line per call, appended by every process (O_APPEND, whole lines)
//   profiler.log       "pid:<pid> dropped:<n>" lines when timeline events were dropped
//   events.log         refused allocations (log_refused_allocation)
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace gpuslice::profiler {

extern std::atomic<bool> g_enabled;

struct Options {
  // Timeline events buffered per thread (rounded up to a power of two). A full ring drops
  // timeline events; the per-API counts and totals stay exact.
  std::size_t ring_events = 65536;
  // Flush every second (and drain filling rings every 100 ms) from a background thread.
  bool background_flusher = true;
  // Flush on SIGTERM/SIGINT, only where the application left the default disposition.
  bool handle_termination_signals = true;
};

// Starts profiling into `dir` (created if missing). `api_names[id]` names the API with that id, as
// it appears in the files ("cuMemAlloc", "cuMemcpyH2D", ...); the names are copied. Returns false and
// logs on failure or when already started. After stop(), start() may be called again (fresh totals).
bool start(const char* dir, const char* const* api_names, std::size_t api_count);
bool start(const char* dir, const char* const* api_names, std::size_t api_count, const Options& options);

// One call of API `api_id` that began at `start_epoch_ns` (CLOCK_REALTIME) and took `duration_ns`.
// Ids outside [0, api_count) are ignored.
void record(std::uint16_t api_id, std::uint64_t start_epoch_ns, std::uint64_t duration_ns);

// Writes everything recorded so far (metrics.log is rewritten whole, timeline.log appended).
void flush();
// Final flush; stops the background flusher. Safe to call more than once.
void stop();

bool running();
std::uint64_t dropped_events();

// A refused device-memory allocation: one line in <profile dir>/events.log (when profiling runs) and
// one GS_LOG(Warn). Rate-limited so a program retrying in a loop cannot flood: the same device and
// size at most once per second, at most 10 lines per second overall; each line that is written
// says how many refusals were suppressed since the previous one. `top_users` is free text
// (e.g. "pid 12 python 6.0 GiB, pid 40 train 1.5 GiB"), may be null.
void log_refused_allocation(int device, std::uint64_t requested, std::uint64_t quota, std::uint64_t in_use,
                            const char* top_users);
// The same with the caller's CLOCK_MONOTONIC time; returns whether a line was written (tests).
bool log_refused_allocation_at(int device, std::uint64_t requested, std::uint64_t quota, std::uint64_t in_use,
                               const char* top_users, std::uint64_t now_monotonic_ns);

}  // namespace gpuslice::profiler
