#include "common/log.h"

#include <unistd.h>

#include <cstdio>

#include "common/enum_names.h"

namespace gpuslice::log {

std::atomic<int> g_level{static_cast<int>(Level::Warn)};

void set_level(Level level) { g_level.store(static_cast<int>(level), std::memory_order_relaxed); }

const char* level_name(Level level) {
  static constexpr const char* kNames[] = {"ERROR", "WARN", "INFO", "DEBUG", "TRACE"};
  return enum_name<Level::Trace>(level, kNames, "?");
}

void vwrite(Level level, const char* fmt, va_list args) {
  char buf[1024];
  int n = std::snprintf(buf, sizeof buf, "[gpuslice %d] %s: ", static_cast<int>(getpid()), level_name(level));
  if (n < 0) return;
  auto used = static_cast<size_t>(n);
  // Callers pass a va_list their va_start began (write() below); the analyzer reports it as
  // uninitialised when it analyses this function on its own.
  // NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized)
  int m = std::vsnprintf(buf + used, sizeof buf - used, fmt, args);
  if (m > 0) used += static_cast<size_t>(m);
  if (used > sizeof buf - 2) used = sizeof buf - 2;
  buf[used++] = '\n';
  // One write keeps lines from concurrent threads and processes whole.
  ssize_t ignored = ::write(STDERR_FILENO, buf, used);
  (void)ignored;
}

void write(Level level, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  vwrite(level, fmt, args);
  va_end(args);
}

}  // namespace gpuslice::log
