#include "interposer/compute_limit.h"

#include <algorithm>
#include <cinttypes>
#include <new>

#include "common/clock.h"
#include "common/log.h"
#include "config/mps_client.h"
#include "interposer/core_driver.h"
#include "interposer/devices.h"
#include "interposer/gate_driver.h"
#include "interposer/launch_flag.h"
#include "interposer/mps_client.h"
#include "interposer/node_presence.h"
#include "interposer/runtime.h"
#include "limiter/compute_limiter.h"
#include "shared_state/turn_order.h"

namespace gpuslice::interposer::compute_limit {
namespace {

// The limiter's cycle: turns are offsets within it.
constexpr std::uint64_t kTurnPeriodNs = limiter::Tuning{}.period_ns;

// The limiter of a limited device, created on its first launch; null when the device is not limited.
limiter::ComputeLimiter* limiter_for(DeviceState& d) {
  limiter::ComputeLimiter* lim = d.limiter.load(std::memory_order_acquire);
  if (lim != nullptr) [[likely]]
    return lim;
  const std::atomic<std::uint32_t>* source = ledger()->compute_limit_source(d.ledger_dev);
  if (source == nullptr) return nullptr;
  if (mps_client::sm_share() != 0) source = &d.partition_limit;  // what the SM share leaves to hold
  const limiter::DriverOps& ops = core_driver().gates;
  // The limit is read live from the shared state, so `gpuslice set --compute` applies at once.
  limiter::Tuning tuning;
  tuning.time_launches = settings().compute_busy_events;
  auto* fresh = new (std::nothrow)
      limiter::ComputeLimiter(gate_clock(), ops, ledger()->compute_state(d.ledger_dev), source, tuning);
  if (fresh == nullptr) return nullptr;
  fresh->set_phase_source(&d.turn_offset);
  limiter::ComputeLimiter* expected = nullptr;
  if (d.limiter.compare_exchange_strong(expected, fresh, std::memory_order_acq_rel)) return fresh;
  delete fresh;
  return expected;
}

// GPUSLICE_MPS_COMPUTE=threads: the process's SM share holds its compute limit, so no GPU-time
// limiter runs while the live limit stays at or above the share; a limit lowered below it is held
// by the limiter at the time share partition_time_limit() gives (read at every launch, as the
// container's limit is). True while nothing is left for a limiter to do and none exists yet.
bool held_by_sm_share(DeviceState& d) {
  const unsigned share = mps_client::sm_share();
  if (share == 0) [[likely]]
    return false;
  const std::atomic<std::uint32_t>* live = ledger()->compute_limit_source(d.ledger_dev);
  const unsigned time_limit =
      config::partition_time_limit(live != nullptr ? live->load(std::memory_order_relaxed) : 0, share);
  if (d.partition_limit.load(std::memory_order_relaxed) != time_limit)
    d.partition_limit.store(time_limit, std::memory_order_relaxed);
  return time_limit == 0 && d.limiter.load(std::memory_order_acquire) == nullptr;
}

limiter::ComputeLimiter* current_limiter() {
  DeviceState* d = current_device_state();
  if (d == nullptr || d->ledger_dev < 0 || held_by_sm_share(*d)) return nullptr;
  return limiter_for(*d);
}

// The limiter's read of its device's SM clock (ComputeLimiter::set_clock_source): 0 until the watcher
// has the NVML handle, or when the read fails.
std::uint32_t device_sm_clock(const void* arg) {
  const auto* d = static_cast<const DeviceState*>(arg);
  const nvmlDevice_t handle = d->nvml.load(std::memory_order_acquire);
  unsigned mhz = 0;
  const auto read = core_driver().sm_clock_mhz;
  return handle != nullptr && read != nullptr && read(handle, &mhz) ? mhz : 0;
}

// Every 100 ms on the watcher: the utilization and SM clock of each limited device into its
// flat-out reference (limiter/clock_correction.h), so the limiter can charge a duty-cycled device's
// higher clock. NVML's handle is looked up here, not on a launching thread (nvmlInit takes ~10 ms).
void sample_clocks() {
  const CoreDriver& driver = core_driver();
  if (driver.nvml_device == nullptr || driver.sm_clock_mhz == nullptr || driver.gpu_utilization == nullptr)
    return;
  constexpr int kMaxTries = 3;  // NVML absent or the GPU unknown to it: no correction (GPU time)
  for_each_ready_device([&driver](DeviceState& d) {
    if (d.ledger_dev < 0) return;
    if (d.clock_source.read_mhz == nullptr) {
      d.clock_source.arg = &d;
      d.clock_source.reference = &d.flat_clock;
      d.clock_source.read_mhz = device_sm_clock;
    }
    // Handed over here, filled in before (the limiter loads the pointer with acquire).
    limiter::ComputeLimiter* lim = d.limiter.load(std::memory_order_acquire);
    if (lim != nullptr && lim != d.clock_given_to) {
      lim->set_clock_source(&d.clock_source);
      d.clock_given_to = lim;
    }
    nvmlDevice_t handle = d.nvml.load(std::memory_order_relaxed);
    if (handle == nullptr) {
      if (d.nvml_tries >= kMaxTries) return;
      ++d.nvml_tries;
      handle = driver.nvml_device(d.uuid);
      if (handle == nullptr) return;
      d.nvml.store(handle, std::memory_order_release);
      unsigned max_mhz = 0;
      if (driver.max_sm_clock_mhz != nullptr && driver.max_sm_clock_mhz(handle, &max_mhz))
        d.flat_clock.set_max_mhz(max_mhz);
    }
    unsigned util = 0;
    unsigned mhz = 0;
    if (driver.gpu_utilization(handle, &util) && driver.sm_clock_mhz(handle, &mhz)) {
      const bool capped = driver.power_capped != nullptr && driver.power_capped(handle);
      d.flat_clock.observe(util, mhz, capped);
    }
  });
}

// The device's limit in percent when it limits anything (strictly between 0 and 100), else 0.
unsigned limit_of(const DeviceState& d) {
  const unsigned pct = d.ledger_dev >= 0 ? ledger()->compute_limit(d.ledger_dev) : 0;
  return pct > 0 && pct < 100 ? pct : 0;
}

// Pushes the busy time the limiters measured into the ledger (for status and metrics).
void publish_compute_usage() {
  shm::Ledger* l = ledger();
  for_each_ready_device([l](DeviceState& d) {
    if (d.ledger_dev < 0) return;
    limiter::ComputeLimiter* lim = d.limiter.load(std::memory_order_acquire);
    if (lim == nullptr) return;
    std::uint64_t busy = lim->stats().busy_ns;
    std::uint64_t published = d.busy_published.exchange(busy, std::memory_order_acq_rel);
    if (busy > published) l->add_busy_ns(d.ledger_dev, busy - published);
  });
}

// A compute limit set live (gpuslice set, limits file) on a process started without one turns the
// launch gate on; the limiters read the limit itself from the shared state at every decision.
bool any_limit() {
  bool any = !settings().compute.empty();
  for_each_ready_device([&any](DeviceState& d) {
    if (limit_of(d) != 0) any = true;
  });
  return any;
}

// Containers with compute limits on the same GPU take turns (see turn_order.h): every process of a
// container publishes the container's limit on the node channel and hands its offset to the limiter.
void refresh_turns() {
  Runtime& rt = *runtime();
  for_each_ready_device([&rt](DeviceState& d) {
    const unsigned pct = limit_of(d);
    NodePresence* presence = pct != 0 ? node_presence::of(d) : d.presence;
    if (presence == nullptr) {
      d.turn_offset.store(shm::kNoTurn, std::memory_order_relaxed);
      return;
    }
    const std::uint64_t now = monotonic_ns();
    presence->publish_compute_limit(pct, now);
    // Others count this container's turn only with a share the operator assigned: so does it
    // (node_presence::refresh_assignments() read it this tick).
    const unsigned assigned = presence->assigned_compute_percent();
    const unsigned share = assigned == 0 ? 0 : std::min(pct, assigned);
    if (share == 0) {
      d.turn_offset.store(shm::kNoTurn, std::memory_order_relaxed);
      return;
    }
    static shm::PeerState peers[shm::NodeChannel::kMaxWriters];  // watcher thread only
    const std::size_t count = presence->channel().read_peers(peers, shm::NodeChannel::kMaxWriters, now);
    d.turn_offset.store(shm::turn_offset(rt.container_key, share, peers, count, kTurnPeriodNs),
                        std::memory_order_relaxed);
  });
}

}  // namespace

limiter::ComputeLimiter* before_launch(CUstream stream, std::uint64_t waited_ns) {
  limiter::ComputeLimiter* lim = current_limiter();
  if (lim != nullptr && lim->gate(stream, waited_ns)) [[unlikely]]
    return lim;
  return nullptr;
}

void after_probed_launch(limiter::ComputeLimiter* probing, CUstream stream) { probing->after_launch(stream); }

void after_host_sync() {
  if (limiter::ComputeLimiter* lim = current_limiter()) lim->note_host_sync();
}

void tick() {
  if (any_limit()) launch_flag::turn_on();
  if (!launch_gated()) return;
  publish_compute_usage();
  refresh_turns();
  sample_clocks();
}

void settle_at_exit() {
  if (!launch_gated()) return;
  for_each_ready_device([](DeviceState& d) {
    limiter::ComputeLimiter* lim = d.limiter.load(std::memory_order_acquire);
    if (lim == nullptr) return;
    lim->settle();
    const limiter::Stats s = lim->stats();
    GS_LOG(Info,
           "compute limiter, device %d: %" PRIu64 " windows (%" PRIu64 " ended by a pause), %" PRIu64
           " drains, %.3f s busy, %.3f s held back, %" PRIu64 " of %" PRIu64 " launches timed, %" PRIu64
           " charges scaled for the SM clock (+%.3f s; flat out %u MHz measured, %u MHz estimated; 0: none)",
           d.index, s.windows, s.paused_windows, s.drains, static_cast<double>(s.busy_ns) / 1e9,
           static_cast<double>(s.throttled_ns) / 1e9, s.timed_launches, s.launches, s.clock_windows,
           static_cast<double>(s.clock_extra_ns) / 1e9, d.flat_clock.mhz(), d.flat_clock.estimate_mhz());
  });
  publish_compute_usage();
}

void after_fork() {
  if (Runtime* rt = runtime()) {
    for (DeviceState& d : rt->devices) {
      d.limiter.store(nullptr);  // its measuring window belonged to the parent
      d.busy_published.store(0);
    }
  }
}

}  // namespace gpuslice::interposer::compute_limit
