// The termination signal handlers: flush from the handler only when this thread holds none of our locks.
#include "profiler/termination_signals.h"

#include <pthread.h>
#include <signal.h>

#include <cerrno>
#include <cstddef>

#include "profiler/flush_writer.h"
#include "profiler/session.h"

namespace gpuslice::profiler::detail {
namespace {

constexpr std::size_t kSignalCount = sizeof kTerminationSignals / sizeof kTerminationSignals[0];
bool g_signal_installed[kSignalCount] = {};  // under g_control_mutex

void set_default_disposition(int signal_number) {
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  sigaction(signal_number, &default_action, nullptr);
}

void on_termination_signal(int signal_number) {
  const int saved_errno = errno;
  // If this thread was interrupted while holding one of our locks, flushing here would deadlock.
  if (t_lock_depth == 0 && g_running.load(std::memory_order_acquire)) {
    lock(&g_flush_mutex);
    if (g_running.load(std::memory_order_relaxed)) flush_locked(true);
    unlock(&g_flush_mutex);
  }
  // Die the way the default disposition would have made us die.
  set_default_disposition(signal_number);
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, signal_number);
  pthread_sigmask(SIG_UNBLOCK, &only, nullptr);
  raise(signal_number);
  errno = saved_errno;
}

}  // namespace

void install_signal_handlers() {
  for (std::size_t i = 0; i < kSignalCount; ++i) {
    struct sigaction current {};
    if (sigaction(kTerminationSignals[i], nullptr, &current) != 0) continue;
    const bool ours = !(current.sa_flags & SA_SIGINFO) && current.sa_handler == on_termination_signal;
    const bool untouched = !(current.sa_flags & SA_SIGINFO) && current.sa_handler == SIG_DFL;
    if (ours) {
      g_signal_installed[i] = true;
    } else if (untouched) {
      struct sigaction action {};
      action.sa_handler = on_termination_signal;
      sigemptyset(&action.sa_mask);
      action.sa_flags = SA_RESTART;
      g_signal_installed[i] = sigaction(kTerminationSignals[i], &action, nullptr) == 0;
    }
  }
}

void restore_signal_handlers() {
  for (std::size_t i = 0; i < kSignalCount; ++i) {
    if (!g_signal_installed[i]) continue;
    g_signal_installed[i] = false;
    struct sigaction current {};
    if (sigaction(kTerminationSignals[i], nullptr, &current) != 0) continue;
    // The application may have installed its own handler since; leave that alone.
    if ((current.sa_flags & SA_SIGINFO) || current.sa_handler != on_termination_signal) continue;
    set_default_disposition(kTerminationSignals[i]);
  }
}

}  // namespace gpuslice::profiler::detail
