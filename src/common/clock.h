// Time sources. Injectable so controllers can be tested with a fake clock.
#pragma once

#include <cstdint>
#include <ctime>

namespace gpuslice {

inline std::uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<std::uint64_t>(ts.tv_nsec);
}

inline std::uint64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<std::uint64_t>(ts.tv_nsec);
}

// Interface for code that needs to read time and sleep, so tests can drive it deterministically.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual std::uint64_t now_ns() = 0;
  virtual void sleep_ns(std::uint64_t ns) = 0;
};

class SystemClock final : public Clock {
 public:
  std::uint64_t now_ns() override { return monotonic_ns(); }
  void sleep_ns(std::uint64_t ns) override {
    timespec ts{static_cast<time_t>(ns / 1000000000ULL), static_cast<long>(ns % 1000000000ULL)};
    while (nanosleep(&ts, &ts) != 0) {
    }
  }
};

}  // namespace gpuslice
