#include "interposer/priority_sharing.h"

#include <algorithm>
#include <cinttypes>
#include <new>

#include "common/clock.h"
#include "common/log.h"
#include "interposer/core_driver.h"
#include "interposer/devices.h"
#include "interposer/gate_driver.h"
#include "interposer/launch_flag.h"
#include "interposer/mps_client.h"
#include "interposer/node_presence.h"
#include "interposer/priority_board.h"
#include "interposer/runtime.h"
#include "limiter/priority_gate.h"

namespace gpuslice::interposer::priority_sharing {
namespace {

bool enabled() {
  const Runtime* rt = runtime();
  return rt != nullptr && rt->has_priority.load(std::memory_order_relaxed);
}

limiter::PriorityGate* current_gate() {
  DeviceState* d = current_device_state();
  return d != nullptr ? d->priority_gate.load(std::memory_order_acquire) : nullptr;
}

// Under MPS a higher priority's kernels do not wait for the time slices of the lower ones' queued
// work: they run beside it, sharing SMs and memory bandwidth with all of it at once. So what the
// lower ones keep queued slows the whole request rather than delaying its start, and the bound is
// tighter than time-sliced: on an H200, 1 ms against 4 ms took 2 ms requests' p99 from 1.45x to
// 1.07x alone and 7 ms requests' from 1.21x to 0.99x, for 0.02-0.04 of the trainer's speed
// (docs/priority.md#which-mode-to-pick).
constexpr std::uint64_t kMpsInFlightBoundNs = 1'000'000;

}  // namespace

// How much a container yields to higher ones is not its own to loosen: its environment
// (GPUSLICE_PRIORITY_IN_FLIGHT, _RAMP, _FLOOR, _LIGHT_SHARE) may only make it yield more than the
// defaults (the bound's by execution mode), or as much more as the operator's assignment allows
// (floor=, light-share=). The rest (_GRACE: how long it holds others after its own work;
// _LONG_KERNEL=alone, _REQUEST_SHARE: stricter bounds; _COST: how the bound is counted; _REFRESH)
// is its own.
limiter::PriorityTuning tuning_from(const config::PriorityTunables& own, const shm::Assignment& assigned) {
  limiter::PriorityTuning defaults;
  if (mps_client::active()) defaults.in_flight_bound_ns = kMpsInFlightBoundNs;
  limiter::PriorityTuning tuning = defaults;
  if (own.in_flight_ns) tuning.in_flight_bound_ns = std::min(*own.in_flight_ns, defaults.in_flight_bound_ns);
  if (own.ramp_ns) tuning.in_flight_ramp_ns = std::max(*own.ramp_ns, defaults.in_flight_ramp_ns);
  if (own.grace_ns) tuning.resume_grace_ns = *own.grace_ns;
  const unsigned floor_cap =
      assigned.floor_percent >= 0 ? static_cast<unsigned>(assigned.floor_percent) : defaults.floor_percent;
  tuning.floor_percent = std::min(own.floor_percent.value_or(defaults.floor_percent), floor_cap);
  if (own.per_kernel_cost) tuning.per_kernel_cost = *own.per_kernel_cost;
  if (own.long_kernels_alone) tuning.long_kernels_alone = *own.long_kernels_alone;
  const unsigned light_cap =
      assigned.light_share_percent >= 0 ? static_cast<unsigned>(assigned.light_share_percent) : 0;
  tuning.light_share_permille = std::min(own.light_share_percent.value_or(0), light_cap) * 10;
  if (own.request_share_percent) tuning.request_share_percent = *own.request_share_percent;
  if (own.refresh_ns) tuning.refresh_ns = *own.refresh_ns;
  return tuning;
}

namespace {

// The device's gate: created once its presence on the node channel is open.
void open_gate(DeviceState& d) {
  NodePresence* presence = node_presence::of(d);
  if (presence == nullptr) return;
  if (d.priority_board == nullptr) d.priority_board = new (std::nothrow) PresenceBoard(*presence);
  if (d.priority_board == nullptr) return;
  limiter::PriorityTuning tuning = tuning_from(settings().priority_tuning, presence->assignment());
  // Under MPS the operator may leave the ranking to the server's client priority (limits file
  // GPUSLICE_MPS_PRIORITY=server): a lower container's launches are then never held.
  if (mps_client::active() && settings().mps_yield == config::MpsYield::Server) {
    tuning.holds = false;
    GS_LOG(Info,
           "priority under MPS: the server's client priority ranks this process's kernels "
           "(GPUSLICE_MPS_PRIORITY=server); its launches are not held");
  }
  // The level claimed (GPUSLICE_PRIORITY, gpuslice set) under the one the operator assigned.
  auto* gate = new (std::nothrow)
      limiter::PriorityGate(gate_clock(), core_driver().gates, d.priority_board, ledger()->priority_source(),
                            tuning, presence->assigned_level());
  if (gate == nullptr) return;
  gate->heartbeat();
  d.priority_board->scan(gate_clock().now_ns(), gate->stale_ns(), gate->priority());
  d.priority_gate.store(gate, std::memory_order_release);
}

// The gate's time held back that the ledger does not have yet.
void publish_held_back(DeviceState& d, const limiter::PriorityGate& gate) {
  const std::uint64_t held = gate.stats().held_back_ns;
  if (held > d.held_back_published) ledger()->add_held_back_ns(held - d.held_back_published);
  d.held_back_published = held;
}

}  // namespace

limiter::PriorityGate* before_launch(CUstream stream, std::uint64_t kernel, std::uint64_t* waited_ns) {
  *waited_ns = 0;
  if (!enabled()) return nullptr;
  limiter::PriorityGate* gate = current_gate();
  if (gate != nullptr) *waited_ns = gate->gate(stream, kernel);
  return gate;
}

bool time_launch(limiter::PriorityGate* gate, CUstream stream) { return gate->time_launch(stream); }

void after_timed_launch(limiter::PriorityGate* timing, CUstream stream) { timing->after_launch(stream); }

void sync_begin() {
  if (!enabled()) return;
  if (limiter::PriorityGate* gate = current_gate()) gate->note_sync_begin();
}

void sync_end() {
  if (!enabled()) return;
  if (limiter::PriorityGate* gate = current_gate()) gate->note_host_sync();
}

bool refresh() {
  if (enabled()) return true;
  shm::Ledger* l = ledger();
  // The level asked for; none asked: the operator's assigned level, so a container cannot opt out of
  // being held by asking for nothing.
  auto level = l != nullptr ? l->priority() : std::nullopt;
  const bool asked = level.has_value();
  if (!asked) level = node_presence::assigned_default();
  if (!level) return false;
  runtime()->has_priority.store(true, std::memory_order_release);
  launch_flag::turn_on();
  GS_LOG(Info, "priority sharing: %s%s", priority_name(*level), asked ? "" : " (assigned by the operator)");
  return true;
}

void tick() {
  if (!refresh()) return;
  for_each_ready_device([](DeviceState& d) {
    if (limiter::PriorityGate* gate = d.priority_gate.load(std::memory_order_acquire)) {
      gate->heartbeat();
      // The node directory is listed here, not on a launching thread.
      d.priority_board->scan(gate_clock().now_ns(), gate->stale_ns(), gate->priority());
      publish_held_back(d, *gate);
      return;
    }
    open_gate(d);
  });
}

void after_fork() {
  if (Runtime* rt = runtime()) {
    for (DeviceState& d : rt->devices) {
      d.priority_gate.store(nullptr,
                            std::memory_order_relaxed);  // leaked: a parent's thread may have held it
      d.held_back_published = 0;
    }
  }
}

void settle_at_exit() {
  if (!enabled()) return;
  for_each_ready_device([](DeviceState& d) {
    limiter::PriorityGate* gate = d.priority_gate.load(std::memory_order_acquire);
    if (gate == nullptr) return;
    gate->settle();
    const limiter::PriorityStats s = gate->stats();
    GS_LOG(Info,
           "priority gate, device %d: %.3f s held back (%" PRIu64 " launches held), %" PRIu64
           " drains, %" PRIu64 " event waits, %" PRIu64 " floor slices, %" PRIu64 " scans, %" PRIu64
           " re-reads, %" PRIu64 " kernels costed, %" PRIu64
           " long kernels alone, device share %u permille, busy periods %" PRIu64
           " us, in-flight bound %" PRIu64 " us",
           d.index, static_cast<double>(s.held_back_ns) / 1e9, s.holds, s.drains, s.event_waits,
           s.floor_slices, s.scans, s.rereads, s.kernels_costed, s.long_kernels, gate->device_share(),
           gate->busy_period_ns() / 1000, gate->in_flight_bound_now() / 1000);
  });
}

}  // namespace gpuslice::interposer::priority_sharing
