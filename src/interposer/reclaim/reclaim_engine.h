// Memory that follows priority (docs/quota.md, "Guarantees and borrowing"): what a container
// allocates with cuMemAlloc above its memory guarantee is borrowed, served from the driver's virtual
// memory management (an address range this library reserves, device memory created and mapped
// into it), so that its backing can move to host memory and back at the same device address while
// the application's launches are held. The watcher thread moves it when a container entitled to
// the memory asks on the reclaim board (reclaim_board.h, reclaim_plan.h), and back when the device
// has room again. What cannot move (other kinds of allocation) is never allocated above the
// guarantee: a container borrows only what it can give back.
#pragma once

#include <atomic>
#include <cstdint>

#include "abi/cuda_abi.h"

namespace gpuslice::interposer {
struct DeviceState;
}

namespace gpuslice::interposer::reclaim {

// Set once this process holds borrowed memory: the launch and copy hooks count themselves from then
// on (enter_submission), so the watcher can hold them for a move.
extern std::atomic<bool> g_borrower;

// Whether an allocation of `bytes` on `d` takes the container above its guarantee (the feature is
// on: the device has a guarantee and a ledger record).
bool above_guarantee(const DeviceState* d, std::uint64_t bytes);

// cuMemAlloc above the guarantee: reserves in the books, then an address range, device memory,
// its mapping and access. CUDA_ERROR_OUT_OF_MEMORY as cuMemAlloc would.
CUresult allocate_borrowed(DeviceState* d, std::uint64_t bytes, CUdeviceptr* dptr);
// cuMemFree of a borrowed pointer (true, with the result in *result; false: not one of ours).
bool free_borrowed(CUdeviceptr ptr, CUresult* result);

// An allocation that could not be moved (pitched, managed, stream-ordered, arrays, the
// application's own virtual memory) taking the container above its guarantee is refused: true
// when it is (counted and said like a quota refusal).
bool refuse_unmovable(DeviceState* d, std::uint64_t bytes);

// The launch and copy hooks around each submission of a borrowing process: while a move holds the
// submissions, enter waits. Returns whether it counted (then leave_submission() is owed).
bool enter_submission_slow();
inline bool enter_submission() {
  if (!g_borrower.load(std::memory_order_relaxed)) [[likely]]
    return false;
  return enter_submission_slow();
}
void leave_submission();

class SubmissionScope {
 public:
  SubmissionScope() : counted_(enter_submission()) {}
  ~SubmissionScope() {
    if (counted_) leave_submission();
  }
  SubmissionScope(const SubmissionScope&) = delete;
  SubmissionScope& operator=(const SubmissionScope&) = delete;

 private:
  bool counted_;
};

// Watcher thread, every tick: publishes this process's borrowed memory, moves what the board asks
// for to host memory, and back when the device has room.
void tick();
// In a forked child: it owns none of its parent's borrowed memory.
void after_fork();
// At exit: the record leaves the board.
void at_exit();

// GPUSLICE_RECLAIM_DEADLINE (a duration, default 2 s): how long an entitled allocation waits.
std::uint64_t deadline_ns();

}  // namespace gpuslice::interposer::reclaim
