// The full-screen `gpuslice top` (ncurses, alternate screen): header with time, GPUs, driver and
// CUDA version; per container and device a memory bar, the compute rate of the last interval
// against the limit and the refusals of the interval; process rows like `nvidia-smi pmon`; a
// summary line per GPU with the compute rate's history; memory coloured by how full the quota is.
// Keys: q quit, s cycle the sort, d cycle the device shown, h (or ?) a help screen, j/k and the
// arrows scroll. Commands get
// what is left of the line.
#pragma once

#include <cstdint>

#include "cli/status_source.h"

namespace gpuslice::cli {

struct TopOptions {
  StatusSource source;
  bool node = false;
  std::uint64_t interval_ns = 1000000000ULL;
  std::uint64_t iterations = 0;  // 0: until q
};

// True when this build has the terminal view (ncurses was found).
bool top_view_available();

// Runs until q, the iteration count or SIGINT/SIGTERM; returns the exit status.
int run_top_view(const TopOptions& options);

}  // namespace gpuslice::cli
