// One part of the priority gate (priority_gate.h): the container's busy signal, the busy time its
// record tells lower priorities. Busy from its first launch after idling for busy_horizon_ns,
// renewed by launches once half of it is left; through a host wait for work it launched, for the
// sync lease; idle when a wait returns with nothing launched meanwhile (after the resume grace,
// while the grace pays). Also the moving mean of its busy periods (a server's requests), by which
// lower ones size their bound. Lock-free; a note_* that returns true changed what the record says,
// and the gate publishes it.
#pragma once

#include <atomic>
#include <cstdint>

namespace gpuslice::limiter {

class BusySignal {
 public:
  struct Timing {
    std::uint64_t busy_horizon_ns;  // how far ahead a launch keeps the record busy
    std::uint64_t sync_lease_ns;    // how long a host wait for launched work keeps it busy
    std::uint64_t resume_grace_ns;  // how long after such a wait's return it is still busy
  };

  explicit BusySignal(const Timing& timing) : timing_(timing) {}

  // At a launch's entry, before any hold: whether the last wait's grace paid (this launch came
  // within it), which decides whether the next wait keeps one.
  void note_launch_begins(std::uint64_t now);
  // The container is busy at `now` (a launch, or the end of a hold): starts a busy period, and
  // pushes the busy time out by a horizon when less than half of one is left (true: publish).
  bool note_busy(std::uint64_t now);
  // A launch went to the driver at `now`: a wait that began before it does not say idle.
  void note_launched(std::uint64_t now) { last_launch_ns_.store(now, std::memory_order_relaxed); }
  // A host wait begins. `announces`: the container has lower ones to tell (not Low). True when the
  // record is now busy for the lease (work it launched runs while it waits).
  bool note_sync_begin(std::uint64_t now, bool announces);
  // Whether nothing was launched since the last wait began: its return finds the queue empty.
  bool idle_since_sync_began() const;
  // That wait returned with nothing launched meanwhile: the busy period ends, and the record says
  // idle from now (or the end of the grace). True when the record changed (its busy time, or a
  // period mean that moved by more than 1/8).
  bool note_sync_return(std::uint64_t now, bool announces);
  // At exit or context teardown: never busy again until the next launch.
  void settle() { busy_until_ns_.store(0, std::memory_order_relaxed); }

  // What the record says: busy until then (past: idle since then; 0: never busy).
  std::uint64_t until_ns() const { return busy_until_ns_.load(std::memory_order_relaxed); }
  // The mean length of the busy periods, 0 = none ended yet.
  std::uint64_t period_ns() const { return busy_period_ns_.load(std::memory_order_relaxed); }

 private:
  bool note_period_end(std::uint64_t now, bool announces);

  const Timing timing_;
  std::atomic<std::uint64_t> busy_until_ns_{0};
  std::atomic<std::uint64_t> last_launch_ns_{0};
  std::atomic<std::uint64_t> sync_begin_ns_{0};
  std::atomic<std::uint64_t> grace_until_ns_{0};  // busy_until set by the last wait's return (its grace)
  // Work conservation: the grace is kept only while it pays, that is while the container's next
  // launch came within it after its last wait returned (a burst of requests). A host-bound one,
  // whose device idles between its short waits, is idle at once, so lower ones use the gaps.
  std::atomic<std::uint64_t> sync_return_ns_{0};  // when the last idle-making wait returned; 0: seen
  std::atomic<bool> grace_pays_{true};
  // Busy periods: the first launch after the last idle-making wait, and their moving mean.
  std::atomic<std::uint64_t> period_start_ns_{0};
  std::atomic<std::uint64_t> busy_period_ns_{0};
};

}  // namespace gpuslice::limiter
