// One policy of the priority gate: its view of the containers above it. The
// records are read by one thread at a time when due (or when a held thread asks); the others use
// the last summary. A full look is due every absent_refresh_ns; in between only the higher records
// it found are re-read, every refresh_ns (the reaction time), and nothing at all when it found none.
#pragma once

#include <atomic>
#include <cstdint>

#include "common/priority.h"
#include "limiter/peer_board.h"

namespace gpuslice::limiter {

class PeerWatch {
 public:
  struct Summary {
    bool higher_present = false;
    // The latest time a higher container that keeps the device busy says its work runs until
    // (past: idle since then). A light one (its kernels occupy the device less than
    // Timing::light_share_permille of its busy time: a host-bound server) is present but never
    // holds: lower ones only keep their queued work within the bound while it is alive.
    std::uint64_t higher_busy_until_ns = 0;
    // The shortest mean busy period (request) among the higher ones that hold, 0 = none known.
    std::uint64_t higher_period_ns = 0;
  };
  struct Timing {
    std::uint64_t refresh_ns;
    std::uint64_t absent_refresh_ns;
    std::uint64_t stale_ns;
    // What an honest peer can claim at most past its publish: a sync lease plus a busy horizon.
    std::uint64_t max_claim_ns;
    // A higher container whose published device share is below this (per mille, and measured) is
    // light; 0 = none is.
    std::uint32_t light_share_permille;
  };

  PeerWatch(PeerBoard* board, const Timing& timing) : board_(board), timing_(timing) {}

  // The summary for a container at `own`, re-read first when due or `force`d.
  Summary look(std::uint64_t now, bool force, Priority own);
  // The last summary's latest busy time of the higher containers.
  std::uint64_t higher_busy_until_ns() const { return higher_busy_until_ns_.load(std::memory_order_acquire); }
  std::uint64_t higher_period_ns() const { return higher_period_ns_.load(std::memory_order_acquire); }
  std::uint64_t scans() const { return scans_.load(std::memory_order_relaxed); }
  std::uint64_t rereads() const { return rereads_.load(std::memory_order_relaxed); }

 private:
  Summary cached() const;

  PeerBoard* board_;
  const Timing timing_;
  std::atomic<std::uint64_t> next_refresh_ns_{0};
  std::atomic<std::uint64_t> next_scan_ns_{0};
  std::atomic<bool> reading_{false};  // one thread reads the board at a time
  std::atomic<bool> higher_present_{false};
  std::atomic<std::uint64_t> higher_busy_until_ns_{0};
  std::atomic<std::uint64_t> higher_period_ns_{0};
  std::atomic<std::uint64_t> scans_{0};
  std::atomic<std::uint64_t> rereads_{0};
};

}  // namespace gpuslice::limiter
