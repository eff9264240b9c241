// Priority sharing between containers on one GPU. See docs/priority.md for the rules.
//
// While a container of higher priority has work queued or running on the GPU, a lower-priority
// container's launches are held back, and while any higher-priority container is alive on the GPU
// the lower one keeps at most `in_flight_bound_ns` of device work queued (launched work cannot be
// recalled, and the driver's time slices make the higher one share the GPU with all of it, so this
// bounds what the higher one's work waits for), less while the higher one has just gone idle (the
// ramp: its next request may be moments away). When the higher ones are idle, lower ones run
// unthrottled apart from that bound; with no higher-priority container at all they run with no
// bookkeeping. A floor gives a lower priority a minimum share of admission time when a higher one
// never idles.
//
// One PriorityGate per (process, device). Containers see each other through a PeerBoard
// (peer_board.h: the node channel in the library, a fake in the simulator). The launch hooks call
// gate() only when some container on the node set a priority. The gate composes its policies, each
// in its own file: its own busy signal (busy_signal.h), its view of the higher ones (peer_watch.h),
// the floor (priority_floor.h), its device share (device_share.h), the in-flight bound
// (in_flight_bound.h) and a hold's debug lines (hold_trace.h).
#pragma once

#include <atomic>
#include <cstdint>

#include "abi/cuda_abi.h"
#include "common/clock.h"
#include "common/priority.h"
#include "limiter/busy_signal.h"
#include "limiter/device_share.h"
#include "limiter/driver_ops.h"
#include "limiter/in_flight_bound.h"
#include "limiter/peer_board.h"
#include "limiter/peer_watch.h"
#include "limiter/priority_floor.h"

namespace gpuslice::limiter {

struct PriorityTuning {
  // Whether a lower container's launches are held at all. false under MPS when the operator leaves
  // the ranking to the MPS server (limits file GPUSLICE_MPS_PRIORITY=server): the gate then only
  // publishes, as at `high`.
  bool holds = true;
  // Device work a lower-priority process may have queued while a higher-priority container is
  // alive: what a higher one's first kernel may find in front of it (plus one kernel longer than
  // this). Kept by waiting for an event every half of it (or by a drain, cuCtxSynchronize, where an
  // event cannot cover the window), so smaller costs more waits.
  std::uint64_t in_flight_bound_ns = 2'000'000;
  // While the higher containers' requests (their busy periods, PeerView::busy_period_ns) are known,
  // the bound is at most this percent of the shortest one's mean, but not below
  // kMinRequestBoundNs: a request then finds at most that share of its own length in front of it,
  // whatever it lasts. 0 (the default) = the bound alone: measured, a share did not shorten a
  // server's requests and cost the trainer beside it (docs/priority.md).
  // GPUSLICE_PRIORITY_REQUEST_SHARE.
  unsigned request_share_percent = 0;
  // A higher priority that just went idle is likely to submit again soon (a server between two
  // requests of a burst): the bound grows in proportion to its idle time, reaching
  // in_flight_bound_ns after this much, so a request queued behind the previous one finds about one
  // lower-priority kernel in front of it and one after a long pause the whole bound. 30 ms, so that
  // a server serving a request every few tens of milliseconds finds a fraction of the bound in front
  // of each (docs/priority.md, rule 3). 0 = no ramp.
  std::uint64_t in_flight_ramp_ns = 30'000'000;
  // Once the most recent higher record has said idle this long (it was busy before), a request
  // is not expected any moment: the bound becomes released_bound_ns of predicted device time
  // instead of in_flight_bound_ns. A trainer's host then runs that far ahead of its GPU, so its
  // own pauses (a garbage collection, a data loader) do not leave the device idle as they do when
  // it may queue only 2 ms; the cost is that the request ending such an idle second finds up to
  // that much in front of it, once. A server at 30-60% load idles tens of milliseconds between
  // requests and never reaches it. 0 = never released.
  std::uint64_t idle_release_ns = 1'000'000'000;
  std::uint64_t released_bound_ns = 10'000'000;
  // While a higher-priority container is alive, a launching thread re-reads the peers' records at
  // most this often; held threads sleep at most this long between looks.
  std::uint64_t refresh_ns = 250'000;
  // All records are looked at (a scan of the node channel) at most this often; in between, only
  // the records of the higher-priority containers the last look found are re-read (every
  // refresh_ns), and none when there were none. A container that starts or rises above this one is
  // seen this late at most. High never reads them.
  std::uint64_t absent_refresh_ns = 100'000'000;
  // While a launching thread is held, it re-reads the higher records this often, so it resumes
  // this soon after they say idle.
  std::uint64_t held_poll_ns = 200'000;
  // Each launch keeps this container's published busy_until at least this far ahead; a launch
  // re-publishes when less than half of it is left (so at most one publish per 5 ms while busy).
  std::uint64_t busy_horizon_ns = 10'000'000;
  // While an application thread waits in a host synchronisation for work it launched, the
  // container counts as busy up to this long (the work is running); the sync's return ends it.
  std::uint64_t sync_lease_ns = 1'000'000'000;
  // After that return (nothing launched meanwhile), the container still counts as busy this long:
  // a server's next request, queued behind the one that just ended, starts within it, and lower
  // priorities would otherwise slip their bounded in-flight work in front of it. 0 = idle at once.
  std::uint64_t resume_grace_ns = 500'000;
  // Records whose heartbeat is older than this are ignored: a container killed mid-burst
  // releases the others this long after its last heartbeat.
  std::uint64_t stale_ns = 500'000'000;
  // Minimum share of admission time for a lower priority whose higher peers never idle, in
  // percent (0 = strict priority, starvation allowed). It applies after `floor_window_ns` of
  // continuous holding, in slices of `floor_slice_ns`.
  unsigned floor_percent = 5;
  std::uint64_t floor_window_ns = 1'000'000'000;
  std::uint64_t floor_slice_ns = 5'000'000;
  // Launches allowed before the first drain, while the cost of a launch is unknown.
  std::uint32_t initial_launch_cap = 2;
  // The bound's windows close by the predicted device time of their launches, each launch's cost
  // learnt by kernel and grid (KernelCosts), rather than by a count of launches sized by the
  // average cost of one (false), which lets a cluster of heavy kernels queue several times the
  // bound. GPUSLICE_PRIORITY_COST=kernel|average.
  bool per_kernel_cost = true;
  // A kernel predicted to run longer than half the bound (with costs per kernel) is launched only
  // once the work queued before it has run, so it is the only thing in flight then, rather than
  // queued behind a window that may hold another such kernel (two of them: twice the bound). A
  // higher priority's request time-slices with all the lower one's queued work and so waits for
  // all of it; the price is the device idling for the host's wake-up before each such kernel. Off
  // by default: no measured gain (docs/priority.md, rule 2). GPUSLICE_PRIORITY_LONG_KERNEL=alone|queued.
  bool long_kernels_alone = false;
  // A higher container whose kernels keep the device busy less than this share (per mille) of its
  // busy time (DeviceShare: measured by its own timing events while lower ones hold) does not hold
  // lower ones: a host-bound server's request leaves the GPU idle most of its time, and holding a
  // trainer through it costs the trainer most of that time. Lower ones keep their queued work
  // within the bound beside it. 0 (the default) = every higher container holds: measured, the
  // server's tail paid for what the trainer gained (docs/priority.md, rule 1).
  // GPUSLICE_PRIORITY_LIGHT_SHARE.
  std::uint32_t light_share_permille = 0;
  // DeviceShare::Timing: spans every share_every_ns while measuring; a measured share is trusted
  // for share_ttl_ns, then measured again while lower ones hold (0: the defaults).
  std::uint64_t share_every_ns = 100'000'000;
  std::uint64_t share_ttl_ns = 1'000'000'000;
};

struct PriorityStats {
  std::uint64_t held_back_ns = 0;    // time launching threads of this process were held back
  std::uint64_t holds = 0;           // launches that were held back at least once
  std::uint64_t drains = 0;          // queue drains to keep in-flight work within the bound
  std::uint64_t event_waits = 0;     // of the bound's steps, those that waited for an event instead
  std::uint64_t floor_slices = 0;    // floor slices granted while a higher priority was busy
  std::uint64_t publishes = 0;       // records published (busy transitions and heartbeats)
  std::uint64_t scans = 0;           // full looks at the records (read_peers)
  std::uint64_t rereads = 0;         // re-reads of the known higher records (read_known_above)
  std::uint64_t kernels_costed = 0;  // kernels (and grids) whose cost the bound learnt
  std::uint64_t long_kernels = 0;    // kernels launched alone (PriorityTuning::long_kernels_alone)
};

class PriorityGate {
 public:
  // The least a bound sized by a higher one's requests comes to (PriorityTuning::request_share_percent).
  static constexpr std::uint64_t kMinRequestBoundNs = 50'000;

  // `priority_source` holds the level the container claims as a Priority's value (kNoPriority:
  // normal), read at every launch so `gpuslice set --priority` applies live; `ceiling_source` (may
  // be null: none) the highest level the operator assigned it: the gate runs at the lower of the
  // two. `board`, `clock` and the sources must outlive the gate.
  PriorityGate(Clock& clock, const DriverOps& ops, PeerBoard* board,
               const std::atomic<std::uint32_t>* priority_source,
               const PriorityTuning& tuning = PriorityTuning{},
               const std::atomic<std::uint32_t>* ceiling_source = nullptr);
  PriorityGate(const PriorityGate&) = delete;
  PriorityGate& operator=(const PriorityGate&) = delete;

  // Before each kernel/graph launch on this device, from any thread. Publishes this container as
  // busy, holds the thread while a higher-priority container is busy, and bounds the work in
  // flight while a higher-priority container is alive. `kernel` identifies what is launched
  // (kernel_key(); 0 = unknown, costed as the average launch). No allocation, no lock. Returns
  // how long the thread waited in it (held, or waiting for queued work), 0 when it did not: the
  // compute limiter's busy probe leaves that out of its span (busy_probe.h).
  std::uint64_t gate(CUstream stream, std::uint64_t kernel = 0);
  // Right before the driver call, once every gate let the launch go (so no hold is inside the
  // pair): true when the launch is timed for the container's device share (DeviceShare), and then
  // after_launch() is called on the same thread once the driver took it.
  bool time_launch(CUstream stream);
  void after_launch(CUstream stream);

  // Around an application's host synchronisation (cuCtxSynchronize, cuStreamSynchronize,
  // cuEventSynchronize, synchronous copies): while it waits, the container stays busy (its work
  // runs); when it returned and nothing was launched meanwhile, the container is idle at once.
  void note_sync_begin();
  void note_host_sync();

  // Every ~100 ms from a background thread: re-publishes this container's record with a fresh
  // heartbeat (and a live priority change). Never sleeps.
  void heartbeat();

  // At exit or context teardown: publishes the container as idle.
  void settle();

  Priority priority() const;
  PriorityStats stats() const;
  // The share of its busy time the device ran this container's work, per mille (0: not measured).
  std::uint32_t device_share() const { return share_.measured_permille(); }
  // The mean length of this container's busy periods (0: none ended yet), as published.
  std::uint64_t busy_period_ns() const { return busy_.period_ns(); }
  // The in-flight bound a launch would meet now (bound_now), for the exit line and tests.
  std::uint64_t in_flight_bound_now() const { return bound_now(clock_.now_ns()); }
  // Records older than this are ignored (PriorityTuning::stale_ns).
  std::uint64_t stale_ns() const { return tuning_.stale_ns; }

 private:
  // The tuning with its zeroes (which would make sleeps spin or the bound admit nothing) replaced
  // by the defaults; every policy is built from it.
  static PriorityTuning effective(const PriorityTuning& tuning);
  void announce_busy(std::uint64_t now);
  void publish_own(std::uint64_t now);
  std::uint64_t bound_now(std::uint64_t now) const;

  Clock& clock_;
  DriverOps ops_;
  PeerBoard* board_;
  const std::atomic<std::uint32_t>* priority_source_;
  const std::atomic<std::uint32_t>* ceiling_source_;
  const PriorityTuning tuning_;  // effective(): before the policies, which are built from it

  // What this container's record says: busy until when, and how long its busy periods last.
  BusySignal busy_;

  // The higher containers' records, refreshed by one thread at a time (every refresh_ns while a
  // higher priority is alive, every absent_refresh_ns otherwise).
  PeerWatch watch_;

  // Floor: admission time owed to this container, accrued while held, spent while admitted.
  PriorityFloor floor_;

  // What lower ones read to tell a device-bound container from a host-bound one.
  DeviceShare share_;
  bool share_supported_ = false;

  // In-flight bound: the windows of launches, their steps (a drain, or an event) and the costs
  // learnt from them; the gate tells it the bound now (bound_now).
  InFlightBound bound_;

  std::atomic<std::uint64_t> held_back_ns_{0};
  std::atomic<std::uint64_t> holds_{0};
  std::atomic<std::uint64_t> publishes_{0};
};

}  // namespace gpuslice::limiter
