#include "shared_state/fault_guard.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>

#include <cstring>

namespace gpuslice::shm::detail {
namespace {

thread_local sigjmp_buf* t_landing = nullptr;
struct sigaction g_previous {};
pthread_once_t g_installed = PTHREAD_ONCE_INIT;

void on_sigbus(int signal, siginfo_t* info, void* context) {
  sigjmp_buf* landing = t_landing;
  if (landing != nullptr) siglongjmp(*landing, 1);
  // Not a guarded access: behave as if we were never installed.
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(signal, info, context);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN &&
      g_previous.sa_handler != nullptr) {
    g_previous.sa_handler(signal);
    return;
  }
  // Default action: restore it; returning re-executes the faulting access, which now kills us.
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  sigaction(SIGBUS, &fallback, nullptr);
}

void install() {
  struct sigaction action {};
  action.sa_sigaction = on_sigbus;
  action.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&action.sa_mask);
  sigaction(SIGBUS, &action, &g_previous);
}

}  // namespace

bool run_fault_guarded(void (*touch)(void* context), void* context) {
  pthread_once(&g_installed, install);
  sigjmp_buf landing;
  if (sigsetjmp(landing, 1) != 0) {
    t_landing = nullptr;
    return false;
  }
  t_landing = &landing;
  touch(context);
  t_landing = nullptr;
  return true;
}

}  // namespace gpuslice::shm::detail
