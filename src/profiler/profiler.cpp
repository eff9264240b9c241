// Starting and stopping a profiling session: profiler.h's entry points over the parts (event_rings,
// flush_writer, background_flusher, termination_signals, process_events, session_buffers).
#include "profiler/profiler.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "common/errno_text.h"
#include "common/log.h"
#include "common/safe_file.h"
#include "profiler/background_flusher.h"
#include "profiler/flush_writer.h"
#include "profiler/process_events.h"
#include "profiler/profile_dir.h"
#include "profiler/session.h"
#include "profiler/session_buffers.h"
#include "profiler/termination_signals.h"

namespace gpuslice::profiler {

std::atomic<bool> g_enabled{false};

namespace detail {

pthread_mutex_t g_control_mutex = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t g_flush_mutex = PTHREAD_MUTEX_INITIALIZER;
Session g_session;
std::atomic<bool> g_running{false};
thread_local int t_lock_depth = 0;

void lock(pthread_mutex_t* mutex) {
  pthread_mutex_lock(mutex);
  ++t_lock_depth;
}
void unlock(pthread_mutex_t* mutex) {
  --t_lock_depth;
  pthread_mutex_unlock(mutex);
}

namespace {

// The profile directory, checked, or -1 after saying why it cannot be used.
int open_checked_profile_dir(const char* dir) {
  int dir_fd = open_profile_dir(dir);
  if (dir_fd >= 0) return dir_fd;
  if (errno == EPERM) {
    GS_LOG(Error,
           "profiler: refusing profile directory %s: another user owns it or others may write it "
           "without the sticky bit",
           dir);
  } else {
    GS_LOG(Error, "profiler: cannot use profile directory %s: %s", dir, fs::errno_name(errno));
  }
  return -1;
}

}  // namespace
}  // namespace detail

using namespace detail;

bool start(const char* dir, const char* const* api_names, std::size_t api_count) {
  return start(dir, api_names, api_count, Options{});
}

bool start(const char* dir, const char* const* api_names, std::size_t api_count, const Options& options) {
  if (dir == nullptr || *dir == '\0' || api_names == nullptr || api_count == 0 || api_count > kMaxApis) {
    GS_LOG(Error, "profiler: invalid start arguments (dir '%s', %zu APIs)", dir == nullptr ? "" : dir,
           api_count);
    return false;
  }
  if (std::strlen(dir) + 64 >= PATH_MAX) {
    GS_LOG(Error, "profiler: profile directory path too long: %s", dir);
    return false;
  }
  Guard control(&g_control_mutex);
  install_process_hooks_once();
  if (g_running.load(std::memory_order_relaxed)) {
    GS_LOG(Warn, "profiler: already started, not starting again into %s", dir);
    return false;
  }
  int dir_fd = open_checked_profile_dir(dir);
  if (dir_fd < 0) return false;
  int timeline_fd = fs::open_in_dir_raw(dir_fd, "timeline.log", O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (timeline_fd < 0) {
    GS_LOG(Error, "profiler: cannot open timeline.log in %s: %s", dir, fs::errno_name(errno));
    ::close(dir_fd);
    return false;
  }
  {
    Guard flush_guard(&g_flush_mutex);
    Guard registry_guard(&g_registry_mutex);
    Session& s = g_session;
    if (!set_up_session_buffers(s, api_names, api_count)) {
      ::close(timeline_fd);
      ::close(dir_fd);
      GS_LOG(Error, "profiler: out of memory starting the profiler");
      return false;
    }
    s.id = g_session_id.load(std::memory_order_relaxed) + 1;
    s.options = options;
    std::memcpy(s.dir, dir, std::strlen(dir) + 1);
    s.ring_capacity = round_up_power_of_two(options.ring_events);
    s.timeline_fd = timeline_fd;
    s.dir_fd = dir_fd;
    s.retired_dropped = 0;
    s.last_written_count_sum = s.last_written_total_sum = s.last_reported_dropped = 0;
    s.own_file_claimed = false;
    s.timeline_used = 0;
    s.timeline_error_logged = false;
    g_session_id.store(s.id, std::memory_order_relaxed);
    g_running.store(true, std::memory_order_release);
  }
  if (options.handle_termination_signals) install_signal_handlers();
  if (options.background_flusher) start_flusher();
  g_enabled.store(true, std::memory_order_release);
  GS_LOG(Info, "profiler: writing per-API profile to %s", dir);
  return true;
}

void flush() { flush_if_running(false); }

void stop() {
  Guard control(&g_control_mutex);
  if (!g_running.load(std::memory_order_relaxed)) return;
  g_enabled.store(false, std::memory_order_relaxed);
  stop_flusher();
  {
    Guard flush_guard(&g_flush_mutex);
    flush_locked(false);
    g_running.store(false, std::memory_order_release);
    ::close(g_session.timeline_fd);
    g_session.timeline_fd = -1;
    ::close(g_session.dir_fd);
    g_session.dir_fd = -1;
  }
  restore_signal_handlers();
}

bool running() { return g_running.load(std::memory_order_acquire); }

}  // namespace gpuslice::profiler
