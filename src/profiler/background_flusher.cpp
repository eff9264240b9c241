// The flusher thread, which must never keep the process alive nor run the application's signal handlers.
#include "profiler/background_flusher.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "common/clock.h"
#include "common/errno_text.h"
#include "common/log.h"
#include "profiler/flush_writer.h"
#include "profiler/session.h"

namespace gpuslice::profiler::detail {

pthread_mutex_t g_wake_mutex = PTHREAD_MUTEX_INITIALIZER;

namespace {

pthread_cond_t g_wake_cond;
bool g_flusher_stop_requested = false;  // under g_wake_mutex

// True when every other thread of the process has ended. glibc ends the process when its last
// thread exits; our flusher must not be the thread that keeps it alive (main may pthread_exit).
// The thread-group leader stays listed as a zombie until the end, hence the second case.
bool only_flusher_left() {
  char buffer[1024];
  int fd = ::open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = ::read(fd, buffer, sizeof buffer - 1);
  ::close(fd);
  if (n <= 0) return false;
  buffer[n] = '\0';
  const char* p = std::strrchr(buffer, ')');
  if (p == nullptr || p[1] != ' ') return false;
  const char state = p[2];
  // After ") " come state (field 3) ... num_threads (field 20); each step lands before field `field`.
  for (int field = 3; field <= 20; ++field) {
    p = std::strchr(p + 1, ' ');
    if (p == nullptr) return false;
  }
  long threads = std::strtol(p + 1, nullptr, 10);
  return threads == 1 || (threads == 2 && state == 'Z');
}

void* flusher_main(void*) {
  pthread_setname_np(pthread_self(), "gpuslice-prof");  // recognisable in top -H, gdb
  std::uint64_t last_flush_ns = monotonic_ns();
  for (;;) {
    pthread_mutex_lock(&g_wake_mutex);
    timespec deadline{};
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_nsec += static_cast<long>(kDrainCheckNs);
    if (deadline.tv_nsec >= 1'000'000'000) {
      deadline.tv_sec += 1;
      deadline.tv_nsec -= 1'000'000'000;
    }
    while (!g_flusher_stop_requested) {
      if (pthread_cond_timedwait(&g_wake_cond, &g_wake_mutex, &deadline) == ETIMEDOUT) break;
    }
    const bool stop_requested = g_flusher_stop_requested;
    pthread_mutex_unlock(&g_wake_mutex);
    if (stop_requested) return nullptr;

    const std::uint64_t now = monotonic_ns();
    if (now - last_flush_ns >= kFlushIntervalNs) {
      last_flush_ns = now;
      flush_if_running(false);
      if (only_flusher_left()) return nullptr;  // exit handlers do the final flush
    } else {
      drain_filling_rings();
    }
  }
}

}  // namespace

void init_flusher_wakeup() {
  pthread_condattr_t attributes;
  pthread_condattr_init(&attributes);
  pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC);
  pthread_cond_init(&g_wake_cond, &attributes);
  pthread_condattr_destroy(&attributes);
  g_flusher_stop_requested = false;
}

void start_flusher() {
  pthread_mutex_lock(&g_wake_mutex);
  g_flusher_stop_requested = false;
  pthread_mutex_unlock(&g_wake_mutex);
  // The flusher must never be picked to run the application's signal handlers.
  sigset_t all;
  sigset_t previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  int error = pthread_create(&g_session.flusher, nullptr, flusher_main, nullptr);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  g_session.flusher_running = error == 0;
  if (error != 0)
    GS_LOG(Warn, "profiler: no background flusher (%s); files are written at exit", fs::errno_name(error));
}

void stop_flusher() {
  if (!g_session.flusher_running) return;
  pthread_mutex_lock(&g_wake_mutex);
  g_flusher_stop_requested = true;
  pthread_cond_signal(&g_wake_cond);
  pthread_mutex_unlock(&g_wake_mutex);
  // When the flusher was the last thread, glibc runs the exit handlers on it: it cannot join itself.
  if (!pthread_equal(pthread_self(), g_session.flusher)) pthread_join(g_session.flusher, nullptr);
  g_session.flusher_running = false;
}

}  // namespace gpuslice::profiler::detail
