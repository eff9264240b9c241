#include "interposer/context_books.h"

#include <atomic>

#include "common/log.h"
#include "interposer/devices.h"
#include "interposer/library_globals.h"

namespace gpuslice::interposer {

namespace {

// Retains of each device's primary context by this process: its first retain creates it, its last
// release destroys it (the driver keeps the same count).
std::atomic<unsigned> g_primary_refs[kMaxDevices] = {};

std::atomic<unsigned>* primary_refs(CUdevice dev) {
  return dev >= 0 && dev < kMaxDevices ? &g_primary_refs[dev] : nullptr;
}

// What a further context reserves while nothing was measured on the device yet: a context took
// about 590 MiB each on an H200 with driver 580 (64 contexts, 37.8 GiB); the books follow the
// driver's figure at the next reconciliation.
constexpr std::uint64_t kUnmeasuredContextBytes = 600ULL << 20;

}  // namespace

std::uint64_t further_context_bytes(const DeviceState& d) {
  std::uint64_t bytes = d.context_each.load(std::memory_order_relaxed);
  const std::uint64_t first = d.context_measured.load(std::memory_order_relaxed);
  if (first > bytes) bytes = first;
  const std::uint64_t shared = d.ledger_dev >= 0 ? ledger()->context_footprint(d.ledger_dev) : 0;
  if (shared > bytes) bytes = shared;
  return bytes != 0 ? bytes : kUnmeasuredContextBytes;
}

namespace {

// Nothing measured a context on this device yet: what one took on another device of the same model
// in this process (a primary context retained on a further device is sized before it is created).
std::uint64_t footprint_on_a_twin(const DeviceState& d) {
  std::uint64_t found = 0;
  for_each_ready_device([&](DeviceState& other) {
    if (&other == &d || other.physical_total != d.physical_total) return;
    const std::uint64_t measured = other.context_measured.load(std::memory_order_relaxed);
    if (measured > found) found = measured;
  });
  return found;
}

}  // namespace

ContextCreation::ContextCreation(CUdevice dev, ContextKind kind) : dev_(dev), kind_(kind) {
  if (ledger() == nullptr) return;
  device_ = device_state(dev);
  if (device_ == nullptr || device_->ledger_dev < 0) {
    device_ = nullptr;
    return;
  }
  if (kind == ContextKind::Primary) {
    const std::atomic<unsigned>* refs = primary_refs(dev);
    if (refs != nullptr && refs->load(std::memory_order_acquire) != 0) return;  // held: no new context
  }
  probe_.before_creation(*device_);
  if (!memory_active()) return;
  if (device_->has_context.load(std::memory_order_relaxed)) {
    reserve_further();
    return;
  }
  std::uint64_t footprint = ledger()->context_footprint(device_->ledger_dev);
  if (footprint == 0) footprint = footprint_on_a_twin(*device_);
  const std::uint64_t libraries = library_globals(dev);
  if (footprint + libraries == 0) return;
  const Reservation r = reserve(device_, footprint + libraries);
  if (r.refused) {
    refused_ = true;
    return;
  }
  reserved_ = footprint;
  libraries_ = libraries;
  device_->context_charge.fetch_add(footprint, std::memory_order_relaxed);
}

namespace {

// The books brought up to date before a further context is sized: what the context charge grew by
// since the last context was created is what that context's first launch took (launch resources
// the creation did not show), learnt as the most seen.
void learn_launch_growth(DeviceState& d) {
  if (reconcile_context_footprint(d) == FootprintResult::NotListed) return;
  const std::uint64_t charge = d.context_charge.load(std::memory_order_relaxed);
  const std::uint64_t mark = d.context_mark.exchange(charge, std::memory_order_relaxed);
  if (charge <= mark + kFootprintSlackBytes) return;
  const std::uint64_t grew = charge - mark;
  std::uint64_t seen = d.launch_growth.load(std::memory_order_relaxed);
  while (grew > seen && !d.launch_growth.compare_exchange_weak(seen, grew)) {
  }
}

}  // namespace

// A context beside the first on the device: its footprint and what its first launch will take are
// reserved like an allocation, and the driver's figure is looked at around the creation (nothing
// else in flight) to learn what one takes.
void ContextCreation::reserve_further() {
  learn_launch_growth(*device_);
  const std::uint64_t launch = device_->launch_growth.load(std::memory_order_relaxed);
  libraries_ = library_globals(dev_);
  const std::uint64_t bytes = further_context_bytes(*device_) + launch + libraries_;
  g_allocs_in_flight.fetch_add(1, std::memory_order_acq_rel);
  in_flight_ = true;
  const Reservation r = reserve(device_, bytes);
  if (r.refused) {
    refused_ = true;
    return;
  }
  reserved_ = bytes;
  owed_ = launch + libraries_;
  further_ = true;
  looked_ = g_allocs_in_flight.load(std::memory_order_acquire) == 1 && own_driver_figure(*device_, &before_);
}

ContextCreation::~ContextCreation() {
  if (!done_ && reserved_ + (further_ ? 0 : libraries_) != 0) {
    // The driver did not create it: nothing was taken.
    if (!further_) device_->context_charge.fetch_sub(reserved_, std::memory_order_relaxed);
    ledger()->release(device_->ledger_dev, reserved_ + (further_ ? 0 : libraries_));
  }
  if (in_flight_) {
    g_allocs_done.fetch_add(1, std::memory_order_acq_rel);
    g_allocs_in_flight.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ContextCreation::succeeded(const void* handle) {
  done_ = true;
  if (kind_ == ContextKind::Primary) {
    if (std::atomic<unsigned>* refs = primary_refs(dev_)) refs->fetch_add(1, std::memory_order_acq_rel);
  }
  if (device_ == nullptr) return;
  if (further_) {
    std::uint64_t bytes = reserved_;
    std::uint64_t after = 0;
    // What the driver took beyond the reservation is charged at once, and reserved by the next one.
    if (looked_ && g_allocs_in_flight.load(std::memory_order_acquire) == 1 &&
        own_driver_figure(*device_, &after) && after > before_ + bytes) {
      const std::uint64_t more = after - before_ - bytes;
      ledger()->charge_held(device_->ledger_dev, more);
      bytes += more;
      const std::uint64_t creation = bytes - owed_;
      std::uint64_t seen = device_->context_each.load(std::memory_order_relaxed);
      while (creation > seen && !device_->context_each.compare_exchange_weak(seen, creation)) {
      }
    }
    // Not in the driver's figure until the first launch: the reconciliation counts it owed.
    if (owed_ != 0) device_->module_prepaid.fetch_add(owed_, std::memory_order_relaxed);
    track_allocation(kind_ == ContextKind::Green ? AllocKind::GreenContext : AllocKind::Context,
                     context_key(kind_, handle, dev_), AllocEntry{bytes, device_->ledger_dev});
    return;
  }
  if (libraries_ != 0) {
    // Loaded into the context now (EAGER) or at its first launch: owed until the figure shows them.
    device_->module_prepaid.fetch_add(libraries_, std::memory_order_relaxed);
    device_->module_charge.fetch_add(libraries_, std::memory_order_relaxed);
    note_first_context_libraries(dev_);
  }
  if (device_->has_context.exchange(true)) return;
  probe_.after_creation(*device_);
  const FootprintResult booked = reconcile_context_footprint(*device_);
  device_->context_mark.store(device_->context_charge.load(std::memory_order_relaxed),
                              std::memory_order_relaxed);
  if (booked == FootprintResult::NotListed && !memory_active()) {
    // The driver's figure for this process is unknown (no NVML, or it cannot tell our pid): count
    // allocations one by one instead, so the books hold them rather than a false 0 (the context's
    // own footprint is then not in them).
    GS_LOG(Info, "device %d: NVML does not list this process; counting its allocations one by one",
           device_->index);
    g_memory_active.store(true, std::memory_order_release);
  }
}

CUresult release_primary_context(CUdevice dev, CUresult (*release_fn)(CUdevice)) {
  std::atomic<unsigned>* refs = primary_refs(dev);
  if (refs == nullptr) return release_fn(dev);
  const bool last = refs->load(std::memory_order_acquire) == 1;
  const CUresult r = last ? release(AllocKind::Context, context_key(ContextKind::Primary, nullptr, dev),
                                    [&] { return release_fn(dev); })
                          : release_fn(dev);
  if (r == CUDA_SUCCESS) {
    unsigned held = refs->load(std::memory_order_relaxed);
    while (held != 0 && !refs->compare_exchange_weak(held, held - 1)) {
    }
  }
  return r;
}

namespace context_books {

void after_fork() {
  for (auto& refs : g_primary_refs) refs.store(0, std::memory_order_relaxed);  // no context of the parent's
}

}  // namespace context_books
}  // namespace gpuslice::interposer
