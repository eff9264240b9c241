#include "mock_log.h"

#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gpuslice::mock {
namespace {
// -1 unknown, 0 off, 1 on: read lazily so a library constructor never touches the environment.
std::atomic<int> g_log_state{-1};
}  // namespace

bool log_enabled() {
  int state = g_log_state.load(std::memory_order_relaxed);
  if (state < 0) {
    const char* value = std::getenv("GPUSLICE_MOCK_LOG");
    state = (value != nullptr && std::strcmp(value, "1") == 0) ? 1 : 0;
    g_log_state.store(state, std::memory_order_relaxed);
  }
  return state == 1;
}

void log(const char* fmt, ...) {
  char line[512];
  int prefix = std::snprintf(line, sizeof(line), "[gpuslice-mock %d] ", static_cast<int>(getpid()));
  if (prefix < 0) return;
  va_list args;
  va_start(args, fmt);
  int body = std::vsnprintf(line + prefix, sizeof(line) - static_cast<size_t>(prefix) - 1, fmt, args);
  va_end(args);
  if (body < 0) return;
  size_t length = std::strlen(line);
  line[length++] = '\n';
  ssize_t ignored = ::write(STDERR_FILENO, line, length);
  (void)ignored;
}

}  // namespace gpuslice::mock
