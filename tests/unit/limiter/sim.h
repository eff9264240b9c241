// Deterministic simulation of a GPU shared by several processes, for testing the compute limiter
// without a device and without wall-clock time.
//
// Time is virtual. Each simulated process thread ("actor") is a real thread, but only one runs at
// a time: an actor runs until it blocks (sleeps, waits for its queue to drain, or finds its launch
// queue full), then the lowest-numbered runnable actor takes over; when none can run, virtual time
// jumps to the next event. The same inputs therefore give the same schedule on every run.
//
// The device runs each context's kernels in order; contexts with queued work share the device
// equally (processor sharing: the fluid limit of the driver's time-slicing between processes), or,
// with `timeslice_ns` set, take turns as the driver does: one context runs alone until its queue
// is empty or, while another has work, its slice ends; a context whose work arrives while another
// runs waits for that one's slice.
// Timing events are markers in a context's queue: one completes, and takes its timestamp, when the
// work queued before it has finished (at once on an idle queue), as cuEventRecord does on a device.
// Host time and device time therefore differ: an actor's host work (sleep) between launches leaves
// the device idle, and the events show it.
// The SM clock (`clock_model`, off by default): a power-capped device runs at `flat_mhz` while
// always busy and up to `idle_mhz` after idling, following its load (busy share, an exponential
// average over `tau_ns`, as a power controller averages power): f = flat + (idle - flat) x (1 -
// load) x busy_rise. Kernels then run (f / flat)^exponent times faster than their nominal duration, so a
// duty-cycled device does more work per busy second than one flat out (an H200's graph replay of
// 4096^3 matmuls: 1480 MHz flat out, 1900 at 20% duty, +2-3 points of throughput). With
// `idle_reads_max`, an idle device's clock reads `idle_mhz` at once, as an H200's did within 100 ms
// of its load stopping (1,770-1,965 MHz where it had run at 1,390 flat out), while the kernels' speed
// still follows the averaged load.
// NVML's utilization (`nvml_utilization`) is the busy share of the driver's last completed sample
// period, not of the moment it is read: it shows a change up to a period late, the clock at once.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "limiter/compute_limiter.h"

namespace gpuslice::limiter::sim {

inline constexpr std::uint64_t kUs = 1'000;
inline constexpr std::uint64_t kMs = 1'000'000;
inline constexpr std::uint64_t kSec = 1'000'000'000;

class World {
 public:
  struct Options {
    std::uint64_t bucket_ns = kMs;  // resolution of the recorded occupancy
    std::size_t max_queue = 1024;   // launches a context may have pending before launch blocks
  };

  World();
  explicit World(const Options& options);
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  // A device context (one per simulated process) whose busy time counts for `container`.
  int add_context(int container);
  // An actor runs `body` on its own thread, launching into context `ctx`.
  void add_actor(int ctx, std::function<void()> body);
  // Runs every actor to completion.
  void run();

  // For actor bodies, the SimClock and the fake driver. They act on the calling actor.
  std::uint64_t now() const { return now_; }
  void sleep(std::uint64_t ns);
  void launch(std::uint64_t duration_ns);
  void synchronize();
  // Timing events of the calling actor's context: ids from 0; the time is the device time at which
  // the event completed, or false while it has not (or was never recorded).
  int create_event();
  void record_event(int event);
  bool event_time(int event, std::uint64_t* at) const;

  // Results. Share of the device the container's kernels held over [from, to).
  double occupancy(int container, std::uint64_t from, std::uint64_t to) const;
  // Sum of durations of the context's kernels completed in [from, to) (work done).
  double work_done(int ctx, std::uint64_t from, std::uint64_t to) const;

  // The actor calling, for the fake driver entry points.
  static World* current();
  // Host time one cuEventRecord takes on the calling actor (0: free). A real driver spends a
  // microsecond or more there, which slows a probed launch's host side.
  std::uint64_t event_record_host_ns = 0;
  // Host time a kernel launch call takes before the kernel is queued (0: none). A real driver
  // spends microseconds there, while an event recorded just before on an idle queue has completed.
  std::uint64_t launch_host_ns = 0;
  // Whether the calling actor's context has nothing queued or running (cuStreamQuery).
  bool queue_empty() const;
  // Time-slicing between contexts (0: processor sharing; GPUSLICE_SIM_TIMESLICE_NS sets the
  // default). Set before run().
  std::uint64_t timeslice_ns = 0;

  // The SM clock (see the top of this file). Set before run(); flat_mhz 0: a constant clock.
  struct ClockModel {
    std::uint32_t flat_mhz = 0;
    std::uint32_t idle_mhz = 0;
    std::uint64_t tau_ns = kSec;
    double exponent = 0.455;
    bool idle_reads_max = false;
    // How far toward idle_mhz the clock rises with the idle share (1: all the way). An H200 under a
    // duty cycle runs its on parts near its flat-out clock (graph replay at 40%: 1,575-1,665 MHz
    // against 1,565 flat out, 1,980 maximum): about 0.2 of the way.
    double busy_rise = 1.0;
  };
  ClockModel clock_model;
  // The SM clock now in MHz (0 without a clock model), as NVML reads it.
  std::uint32_t sm_clock_mhz() const;
  // Share of [from, to) during which any context's kernel ran.
  double device_busy(std::uint64_t from, std::uint64_t to) const;
  // NVML's utilization now (nvmlDeviceGetUtilizationRates): the device's busy share over the last
  // completed sample period, periods of `period_ns` from time 0 (200 ms on an H200); 0 before one.
  double nvml_utilization(std::uint64_t period_ns) const;

 private:
  enum class State { Ready, Running, Sleeping, WaitEmpty, WaitSpace, Done };
  struct Actor {
    int id = 0;
    int ctx = 0;
    std::function<void()> body;
    State state = State::Ready;
    std::uint64_t wake_ns = 0;
    std::condition_variable cv;
    std::thread thread;
  };
  struct Context {
    int container = 0;
    std::deque<double> remaining;  // ns of work left per queued kernel, head running
    std::deque<std::uint64_t> nominal;
    std::deque<std::vector<int>> markers;  // events recorded after each queued kernel
    std::vector<double> work_by_bucket;
  };

  void actor_main(Actor* actor);
  void block(std::unique_lock<std::mutex>& lock, Actor* self);
  Actor* pick_runnable();
  Actor* running();
  bool runnable(const Actor& actor) const;
  // Hands the run to the next actor (advancing time as needed); false when all are done.
  bool dispatch(std::unique_lock<std::mutex>& lock);
  void advance_device(std::uint64_t to);
  void advance_sliced(std::uint64_t to);
  // Runs the head kernel of `ctx` for `step` ns at `share` of the device (from now_), completing it
  // and its events when its work is done.
  void run_head(Context& ctx, std::uint64_t step, double share);
  // Time-slicing: the context that runs from now, and until when it may (its slice's end while
  // another waits, else never ends).
  struct Turn {
    int ctx = -1;
    std::uint64_t until = 0;
  };
  Turn turn() const;
  // How long the turn's context runs before its head kernel completes or its slice ends (1+ ns).
  std::uint64_t turn_step(const Turn& t) const;
  bool next_device_event(std::uint64_t* at) const;
  void add_busy(std::vector<double>& buckets, std::uint64_t from, std::uint64_t to, double share);
  // Kernels' speed at the clock now (1 without a clock model), and the load after `step` ns busy or idle.
  double speed() const;
  double busy_clock_mhz() const;  // the clock while a kernel runs
  void age_load(std::uint64_t step, bool busy);

  Options options_;
  mutable std::mutex mutex_;
  std::condition_variable main_cv_;
  std::uint64_t now_ = 0;
  std::vector<std::unique_ptr<Actor>> actors_;
  std::vector<Context> contexts_;
  std::vector<std::vector<double>> busy_by_container_;
  std::vector<std::uint64_t> event_done_;  // per event: completion time + 1, 0 = not completed
  int holder_ = -1;                        // time-slicing: the context running, and its slice's end
  std::uint64_t slice_end_ = 0;
  bool finished_ = false;
  double load_ = 1.0;  // the clock model's busy share: starts as if flat out
};

// Clock of the calling actor's world.
class SimClock final : public Clock {
 public:
  explicit SimClock(World& world) : world_(world) {}
  std::uint64_t now_ns() override { return world_.now(); }
  void sleep_ns(std::uint64_t ns) override { world_.sleep(ns); }

 private:
  World& world_;
};

// Driver entry points routed to the calling actor's context.
DriverOps sim_driver_ops();
// The same with what a pipelined in-flight bound needs (a context id, waiting for one event), as
// the real driver and the simulated libcuda give it: its steps wait for the previous window's
// event instead of draining the queue. A waiting thread looks every 20 us (a host wake-up).
DriverOps sim_driver_ops_pipelined();

}  // namespace gpuslice::limiter::sim
