#include "interposer/priority_sharing.h"

#include <cinttypes>
#include <new>

#include "common/clock.h"
#include "common/log.h"
#include "interposer/devices.h"
#include "interposer/gate_driver.h"
#include "interposer/runtime.h"
#include "limiter/priority_channel_board.h"
#include "limiter/priority_gate.h"

namespace gpuslice::interposer::priority_sharing {
namespace {

// One per device of this process; created by the watcher, read by launching threads.
struct Slot {
  shm::NodeChannel* channel = nullptr;     // watcher thread only (also lent to the turns)
  limiter::ChannelBoard* board = nullptr;  // watcher thread only after creation
  std::atomic<limiter::PriorityGate*> gate{nullptr};
  std::atomic<std::uint32_t> compute_limit{0};  // published with the record
  std::uint64_t held_back_added = 0;            // watcher thread only: gate time already in the ledger
  bool failed = false;                          // watcher thread only
};

Slot g_slots[kMaxDevices];
std::atomic<bool> g_enabled{false};
std::atomic<std::uint32_t> g_priority{static_cast<std::uint32_t>(limiter::Priority::Normal)};

limiter::PriorityGate* current_gate() {
  DeviceState* d = current_device_state();
  if (d == nullptr || d->index < 0 || d->index >= kMaxDevices) return nullptr;
  return g_slots[d->index].gate.load(std::memory_order_acquire);
}

}  // namespace

bool enabled() { return g_enabled.load(std::memory_order_relaxed); }

void enable(unsigned priority_level) {
  g_priority.store(priority_level, std::memory_order_relaxed);
  g_enabled.store(true, std::memory_order_release);
}

bool refresh_level() {
  shm::Ledger* l = ledger();
  const int level = l != nullptr ? l->priority() : -1;
  if (level < 0) return false;
  if (!enabled()) {
    enable(static_cast<unsigned>(level));
    GS_LOG(Info, "priority set live: %d", level);
  } else {
    g_priority.store(static_cast<std::uint32_t>(level), std::memory_order_relaxed);
  }
  return true;
}

void before_launch(CUstream stream, std::uint64_t kernel) {
  if (limiter::PriorityGate* gate = current_gate()) gate->gate(stream, kernel);
}

void sync_begin() {
  if (limiter::PriorityGate* gate = current_gate()) gate->note_sync_begin();
}

void sync_end() {
  if (limiter::PriorityGate* gate = current_gate()) gate->note_host_sync();
}

namespace {

// The defaults, with the container's own GPUSLICE_PRIORITY_IN_FLIGHT, _RAMP, _GRACE, _FLOOR, _COST and
// _LONG_KERNEL.
limiter::PriorityTuning tuning_from(const config::PriorityTunables& own) {
  limiter::PriorityTuning tuning;
  if (own.in_flight_ns) tuning.in_flight_bound_ns = *own.in_flight_ns;
  if (own.ramp_ns) tuning.in_flight_ramp_ns = *own.ramp_ns;
  if (own.grace_ns) tuning.resume_grace_ns = *own.grace_ns;
  if (own.floor_percent) tuning.floor_percent = *own.floor_percent;
  if (own.per_kernel_cost) tuning.per_kernel_cost = *own.per_kernel_cost;
  if (own.long_kernels_alone) tuning.long_kernels_alone = *own.long_kernels_alone;
  return tuning;
}

}  // namespace

void tick(DeviceState& d, const config::Settings& settings, std::uint64_t container_key) {
  if (!enabled() || d.index < 0 || d.index >= kMaxDevices) return;
  Slot& slot = g_slots[d.index];
  const unsigned pct = d.ledger_dev >= 0 && ledger() != nullptr ? ledger()->compute_limit(d.ledger_dev) : 0;
  slot.compute_limit.store(pct > 0 && pct < 100 ? pct : 0, std::memory_order_relaxed);
  if (limiter::PriorityGate* gate = slot.gate.load(std::memory_order_acquire)) {
    gate->heartbeat();
    const std::uint64_t held = gate->stats().held_back_ns;
    if (held > slot.held_back_added && ledger() != nullptr)
      ledger()->add_held_back_ns(held - slot.held_back_added);
    slot.held_back_added = held;
    return;
  }
  if (slot.failed || container_key == 0) return;
  if (d.turns == nullptr) {
    auto opened = shm::NodeChannel::open(settings.node_dir, d.uuid, container_key, settings.node_writer);
    if (!opened) {
      slot.failed = true;
      GS_LOG(Warn, "no priority sharing on %s: %s", d.uuid, opened.error().c_str());
      return;
    }
    d.turns = std::move(opened).value().release();
  }
  slot.channel = d.turns;
  slot.board = new (std::nothrow) limiter::ChannelBoard(*slot.channel, &slot.compute_limit);
  if (slot.board == nullptr) return;
  const limiter::DriverOps ops = gate_driver_ops();
  auto* gate = new (std::nothrow) limiter::PriorityGate(gate_clock(), ops, slot.board, &g_priority,
                                                        tuning_from(settings.priority_tuning));
  if (gate == nullptr) return;
  gate->heartbeat();
  slot.gate.store(gate, std::memory_order_release);
  GS_LOG(Debug, "priority sharing on %s: record %s", d.uuid, slot.channel->record_path().c_str());
}

void fill_record(const DeviceState& d, shm::PeerState& record) {
  if (d.index < 0 || d.index >= kMaxDevices) return;
  const Slot& slot = g_slots[d.index];
  if (slot.gate.load(std::memory_order_acquire) != nullptr && slot.board != nullptr)
    slot.board->fill_priority_fields(record);
}

void after_fork() {
  for (Slot& slot : g_slots) {
    slot.gate.store(nullptr, std::memory_order_relaxed);  // leaked: a thread of the parent may have held it
    slot.board = nullptr;
    slot.held_back_added = 0;
  }
}

void settle_at_exit() {
  if (!enabled()) return;
  for (int i = 0; i < kMaxDevices; ++i) {
    limiter::PriorityGate* gate = g_slots[i].gate.load(std::memory_order_acquire);
    if (gate == nullptr) continue;
    gate->settle();
    const limiter::PriorityStats s = gate->stats();
    GS_LOG(Info,
           "priority gate, device %d: %.3f s held back (%" PRIu64 " launches held), %" PRIu64
           " drains, %" PRIu64 " event waits, %" PRIu64 " floor slices, %" PRIu64 " scans, %" PRIu64
           " re-reads, %" PRIu64 " kernels costed, %" PRIu64 " long kernels alone",
           i, static_cast<double>(s.held_back_ns) / 1e9, s.holds, s.drains, s.event_waits, s.floor_slices,
           s.scans, s.rereads, s.kernels_costed, s.long_kernels);
  }
}

}  // namespace gpuslice::interposer::priority_sharing
