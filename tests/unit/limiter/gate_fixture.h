// What the priority gate's tests share (priority_gate_test.cpp, peer_watch_test.cpp,
// priority_floor_test.cpp): a board fed by hand, a peer's record, a priority source, a driver that
// counts drains, and the log captured at debug level. The clock, the model device and the units of
// time are fake_device.h's.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/log.h"
#include "fake_device.h"
#include "limiter/peer_board.h"
#include "limiter/priority_gate.h"

namespace gpuslice::limiter {

class FakeBoard final : public PeerBoard {
 public:
  // A full look: every record, and which ones are known for re-reads.
  std::size_t read_peers(PeerView* out, std::size_t capacity, std::uint64_t now_ns, std::uint64_t) override {
    ++reads;
    known.clear();
    std::size_t n = 0;
    for (std::size_t i = 0; i < peers.size() && n < capacity; ++i) {
      known.push_back(i);
      out[n++] = view(i, now_ns);
    }
    return n;
  }
  // Only the records the last full look found above `above`, as the node channel does.
  std::size_t read_known_above(PeerView* out, std::size_t capacity, std::uint64_t now_ns, std::uint64_t,
                               Priority above) override {
    ++rereads;
    std::size_t n = 0;
    for (std::size_t i : known) {
      if (n == capacity || i >= peers.size()) break;
      if (static_cast<std::uint32_t>(peers[i].priority) <= static_cast<std::uint32_t>(above)) continue;
      out[n++] = view(i, now_ns);
    }
    return n;
  }
  PeerView view(std::size_t i, std::uint64_t now_ns) const {
    PeerView v = peers[i];
    if (now_ns >= idle_from) v.busy_until_ns = idle_from;  // its sync returned: it published idle since
    return v;
  }
  void publish(const PeerView& own) override { published.push_back(own); }
  std::vector<PeerView> peers;
  std::vector<PeerView> published;
  std::vector<std::size_t> known;
  std::uint64_t idle_from = UINT64_MAX;
  int reads = 0;
  int rereads = 0;
};

// Host synchronisations (the bound's drains) since the last counting_ops().
inline int g_syncs = 0;
inline CUresult counting_sync() {
  ++g_syncs;
  return CUDA_SUCCESS;
}

inline DriverOps counting_ops() {
  g_syncs = 0;
  DriverOps ops;
  ops.ctx_synchronize = &counting_sync;
  return ops;
}

inline std::atomic<std::uint32_t> source(Priority p) {
  return std::atomic<std::uint32_t>(static_cast<std::uint32_t>(p));
}

// The arithmetic of the bound's tests is written for a 2 ms bound, whatever the default.
inline PriorityTuning two_ms_bound() {
  PriorityTuning t;
  t.in_flight_bound_ns = 2 * kMs;
  return t;
}

inline PeerView peer(Priority p, std::uint64_t heartbeat, std::uint64_t busy_until = 0) {
  PeerView v;
  v.priority = p;
  v.heartbeat_ns = heartbeat;
  v.busy_until_ns = busy_until;
  return v;
}

// Runs `body` with the log at debug level; returns what it wrote to stderr.
template <typename Body>
std::string stderr_at_debug(Body body) {
  const int level = log::g_level.load();
  log::set_level(log::Level::Debug);
  testing::internal::CaptureStderr();
  body();
  std::string err = testing::internal::GetCapturedStderr();
  log::set_level(static_cast<log::Level>(level));
  return err;
}

}  // namespace gpuslice::limiter
