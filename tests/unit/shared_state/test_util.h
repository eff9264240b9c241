// Helpers shared by the shared-state tests: unique temporary directories and raw access to a
// state file's mapping (to corrupt it or to stage situations no API call produces).
#pragma once

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "shared_state/layout.h"

namespace gpuslice::shm::testing {

// The device of the ledger and isolation tests.
inline constexpr char kUuid[] = "GPU-11111111-2222-3333-4444-555555555555";
inline constexpr std::uint64_t kTotal = 80ULL << 30;

class TempDir {
 public:
  TempDir() {
    const char* base = getenv("TMPDIR");
    std::string pattern =
        std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/gpuslice-shm-XXXXXX";
    char* made = mkdtemp(pattern.data());
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

 private:
  std::string path_;
};

// Maps an existing state file read-write, bypassing validation.
class RawMapping {
 public:
  explicit RawMapping(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd_ < 0) return;
    base_ = mmap(nullptr, layout::kFileSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (base_ == MAP_FAILED) base_ = nullptr;
  }
  ~RawMapping() {
    if (base_ != nullptr) munmap(base_, layout::kFileSize);
    if (fd_ >= 0) close(fd_);
  }
  RawMapping(const RawMapping&) = delete;
  RawMapping& operator=(const RawMapping&) = delete;

  bool ok() const { return base_ != nullptr; }
  layout::Header& header() { return *static_cast<layout::Header*>(base_); }
  layout::Slot& slot(std::uint32_t i) {
    return reinterpret_cast<layout::Slot*>(static_cast<unsigned char*>(base_) + layout::kSlotsOffset)[i];
  }

 private:
  int fd_ = -1;
  void* base_ = nullptr;
};

}  // namespace gpuslice::shm::testing
