#include "interposer/background_thread.h"

#include <pthread.h>
#include <signal.h>

namespace gpuslice::interposer {

bool start_background_thread(void* (*main)(void*)) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  // The new thread inherits the mask in force here.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t thread;
  const bool started = pthread_create(&thread, &attr, main, nullptr) == 0;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  pthread_attr_destroy(&attr);
  return started;
}

}  // namespace gpuslice::interposer
