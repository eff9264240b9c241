// Diagnostics of the simulated driver. A real libcuda prints nothing, so neither does the mock
// unless GPUSLICE_MOCK_LOG=1: programs under test must see the same stderr as on a real GPU.
#pragma once

namespace gpuslice::mock {

bool log_enabled();
void log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace gpuslice::mock

#define MOCK_LOG(...)                      \
  do {                                     \
    if (::gpuslice::mock::log_enabled()) { \
      ::gpuslice::mock::log(__VA_ARGS__);  \
    }                                      \
  } while (0)
