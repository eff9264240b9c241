// Helpers shared by the node tests: unique temporary directories, files, a fake clock.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "common/clock.h"

namespace gpuslice::node::test {

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it on destruction. Short
// names: unix socket paths must fit in 108 bytes.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
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
