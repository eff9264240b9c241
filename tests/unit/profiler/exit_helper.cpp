// A program whose main thread ends with pthread_exit while the profiler's flusher runs: glibc ends
// the process when its last thread exits, so the flusher must step aside. Usage: exit_helper DIR
#include <pthread.h>

#include <cstdio>

#include "profiler/profiler.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const char* const names[] = {"cuInit", "cuGetProcAddress"};
  gpuslice::profiler::Options options;
  options.handle_termination_signals = false;
  if (!gpuslice::profiler::start(argv[1], names, 2, options)) return 3;
  gpuslice::profiler::record(1, 3, 4);
  pthread_exit(nullptr);
}
