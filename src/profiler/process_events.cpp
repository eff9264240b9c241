// Fork and exit: a forked child starts with empty totals, and the files are complete at exit.
#include "profiler/process_events.h"

#include <pthread.h>

#include <cstdlib>
#include <cstring>

#include "profiler/background_flusher.h"
#include "profiler/event_rings.h"
#include "profiler/flush_writer.h"
#include "profiler/profiler.h"
#include "profiler/session.h"

namespace gpuslice::profiler::detail {
namespace {

bool g_process_hooks_installed = false;

// Every lock of the profiler, in the one order they are taken, so none is held across the fork.
void before_fork() {
  lock(&g_control_mutex);
  lock(&g_flush_mutex);
  lock(&g_registry_mutex);
  lock(&g_wake_mutex);
}

void after_fork_parent() {
  unlock(&g_wake_mutex);
  unlock(&g_registry_mutex);
  unlock(&g_flush_mutex);
  unlock(&g_control_mutex);
}

// The child starts with empty buffers and totals: what the parent recorded is the parent's to
// write. Only this thread exists here, so the other threads' rings can be freed outright.
void after_fork_child() {
  const bool was_running = g_running.load(std::memory_order_relaxed);
  Session& s = g_session;
  if (was_running) {
    free_rings_in_fork_child();
    s.id = g_session_id.load(std::memory_order_relaxed) + 1;
    g_session_id.store(s.id, std::memory_order_relaxed);
    std::memset(s.retired_count, 0, s.api_count * sizeof(std::uint64_t));
    std::memset(s.retired_total, 0, s.api_count * sizeof(std::uint64_t));
    s.retired_dropped = 0;
    s.last_written_count_sum = 0;
    s.last_written_total_sum = 0;
    s.last_reported_dropped = 0;
    s.own_file_claimed = false;
    s.timeline_used = 0;
    s.flusher_running = false;  // threads do not survive fork
  }
  reset_refusal_lock_after_fork();
  init_flusher_wakeup();
  after_fork_parent();
  if (was_running && s.options.background_flusher) {
    Guard guard(&g_control_mutex);
    start_flusher();
  }
}

// Exit handlers registered from main's lifetime run before the libraries' destructors, which may
// still make CUDA calls (freeing caches): flush here, stop for good in the destructor below.
void flush_at_exit() { flush_if_running(false); }

__attribute__((destructor)) void stop_at_unload() { stop(); }

}  // namespace

void install_process_hooks_once() {
  if (g_process_hooks_installed) return;
  g_process_hooks_installed = true;
  init_flusher_wakeup();
  create_thread_exit_key();
  pthread_atfork(before_fork, after_fork_parent, after_fork_child);
  std::atexit(flush_at_exit);
}

}  // namespace gpuslice::profiler::detail
