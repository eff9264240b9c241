// Helpers shared by the shared-state tests: the shared temporary directory and raw access to a
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
#include "temp_dir.h"

namespace gpuslice::shm::testing {

// The device of the ledger and isolation tests.
inline constexpr char kUuid[] = "GPU-11111111-2222-3333-4444-555555555555";
inline constexpr std::uint64_t kTotal = 80ULL << 30;

using gpuslice::test::TempDir;

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
