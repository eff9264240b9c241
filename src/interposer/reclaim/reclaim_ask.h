// The asking side of reclaim (docs/quota.md, "Guarantees and borrowing"): an allocation the driver
// refused for want of device memory, made by a container within its guarantee (or of a higher level
// than a borrower), waits for borrowers to move what they borrowed to host memory, at most until
// the reclaim deadline (GPUSLICE_RECLAIM_DEADLINE), then fails with CUDA_ERROR_OUT_OF_MEMORY and
// one log line. Included by memory_books.h: depends on nothing of the books.
#pragma once

#include <cstdint>

#include "abi/cuda_abi.h"

namespace gpuslice::interposer {
struct DeviceState;
}

namespace gpuslice::interposer::reclaim {

// One waiting allocation. Posts its need on the reclaim board when it is entitled and some borrower
// may give; active() says whether it waits at all.
class Ask {
 public:
  Ask(DeviceState* d, std::uint64_t bytes);
  ~Ask();
  Ask(const Ask&) = delete;
  Ask& operator=(const Ask&) = delete;

  bool active() const { return active_; }
  // Sleeps a little before the next try; false once the deadline passed.
  bool pause();
  // The last try's result: a miss is said once per episode.
  void finish(CUresult result);

 private:
  DeviceState* device_ = nullptr;
  std::uint64_t bytes_ = 0;
  std::uint64_t started_ns_ = 0;
  std::uint64_t deadline_ns_ = 0;
  std::uint64_t published_ns_ = 0;
  bool active_ = false;
  bool within_ = false;
};

// Whether the device's books make an allocation worth asking for at all (a guarantee or a level,
// and a record): one relaxed load when the feature is off.
bool asking_possible(const DeviceState* d);

}  // namespace gpuslice::interposer::reclaim
