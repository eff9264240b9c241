// A fresh directory for one test (under $TMPDIR, else /tmp), removed with all it holds when the
// test ends. Shared by the tests of every component; path() is empty when none could be made.
#pragma once

#include <stdlib.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

namespace gpuslice::test {

class TempDir {
 public:
  // `prefix` names the directory, so that one left behind by a killed test says whose it was.
  explicit TempDir(const std::string& prefix = "gpuslice-test") {
    const char* base = std::getenv("TMPDIR");
    // A long $TMPDIR would push the unix sockets some tests make past their 108 bytes: /tmp then.
    const bool usable = base != nullptr && *base != '\0' && std::strlen(base) < 40;
    std::string pattern = std::string(usable ? base : "/tmp") + "/" + prefix + "-XXXXXX";
    const char* made = mkdtemp(pattern.data());
    path_ = made != nullptr ? made : "";
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  std::string operator/(const std::string& name) const { return file(name); }

 private:
  std::string path_;
};

}  // namespace gpuslice::test
