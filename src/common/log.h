// Logging for code that runs inside other people's processes: formats into a stack buffer and
// writes with one write(2), so it never allocates, never locks and is safe in hot paths and
// after fork. Messages go to stderr prefixed with "[gpuslice <pid>] LEVEL".
#pragma once

#include <atomic>
#include <cstdarg>

namespace gpuslice::log {

enum class Level : int { Error = 0, Warn = 1, Info = 2, Debug = 3, Trace = 4 };

// Current threshold; messages above it are dropped before formatting.
extern std::atomic<int> g_level;

inline bool enabled(Level level) {
  return static_cast<int>(level) <= g_level.load(std::memory_order_relaxed);
}
void set_level(Level level);
const char* level_name(Level level);

void write(Level level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void vwrite(Level level, const char* fmt, va_list args) __attribute__((format(printf, 2, 0)));

}  // namespace gpuslice::log

#define GS_LOG(level, ...)                                                \
  do {                                                                    \
    if (::gpuslice::log::enabled(::gpuslice::log::Level::level)) {        \
      ::gpuslice::log::write(::gpuslice::log::Level::level, __VA_ARGS__); \
    }                                                                     \
  } while (0)
