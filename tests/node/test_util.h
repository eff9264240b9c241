// Helpers shared by the node tests: temporary directories, files, a fake clock.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

#include "common/clock.h"
#include "temp_dir.h"

namespace gpuslice::node::test {

// The two GPUs of the device plugin, catalog, assignment and API tests.
inline constexpr const char* kUuid0 = "GPU-11111111-aaaa-4000-8000-000000000000";
inline constexpr const char* kUuid1 = "GPU-22222222-bbbb-4000-8000-000000000001";

// The shared temp-dir helper with a short name (unix socket paths must fit in 108 bytes) that
// throws when no directory could be made.
class TempDir : public gpuslice::test::TempDir {
 public:
  TempDir() : gpuslice::test::TempDir("gsn") {
    if (path().empty()) throw std::runtime_error("mkdtemp failed");
  }
};

std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& content);
std::string fixture(const std::string& name);  // contents of tests/node/fixtures/<name>

class FakeClock final : public Clock {
 public:
  std::uint64_t now_ns() override { return now_; }
  void sleep_ns(std::uint64_t ns) override { now_ += ns; }
  void advance_ns(std::uint64_t ns) { now_ += ns; }

 private:
  std::uint64_t now_ = 1'000'000'000;
};

// Polls `done` until it holds or `timeout` passes (for events on other threads, not for timing).
bool wait_until(const std::function<bool()>& done,
                std::chrono::milliseconds timeout = std::chrono::seconds(10));

}  // namespace gpuslice::node::test
