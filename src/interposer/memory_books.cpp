#include "interposer/memory_books.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/log.h"
#include "interposer/devices.h"
#include "interposer/driver_ops.h"
#include "interposer/driver_reservations.h"
#include "interposer/library_globals.h"
#include "profiler/profiler.h"
#include "shared_state/layout.h"
#include "shared_state/proc_identity.h"

namespace gpuslice::interposer {

std::atomic<std::uint64_t> g_allocs_in_flight{0};
std::atomic<std::uint64_t> g_allocs_done{0};

namespace {

// Per ledger record: what the driver's figure for this process grew by when it opened another
// process's memory, while those imports are open.
constexpr int kRecordCount = static_cast<int>(shm::layout::kMaxDeviceRecords);
std::atomic<std::uint64_t> g_imported_counted[kRecordCount] = {};

// The pid NVML reports for this process; 0 until known. Usually getpid() (driver 580 answers with
// the caller's namespace pids); where NVML shows host pids instead, it is learnt when this
// process's first context appears (ContextProbe).
std::atomic<unsigned> g_nvml_pid{0};

// Names the three processes holding the most on the device, so the user knows whom to ask. The
// snapshot is refreshed at most ten times a second: programs commonly retry in a tight loop.
std::string top_users(const DeviceState& d) {
  static std::atomic<std::uint64_t> last_ns{0};
  std::uint64_t now = monotonic_ns();
  std::uint64_t prev = last_ns.load(std::memory_order_relaxed);
  if (now - prev < 100000000ULL || !last_ns.compare_exchange_strong(prev, now)) return {};
  shm::Snapshot snap = ledger()->snapshot();
  std::vector<std::pair<std::uint64_t, const shm::ProcessRow*>> users;
  for (const auto& p : snap.processes) {
    auto dev = static_cast<std::size_t>(d.ledger_dev);
    if (dev < p.used_by_device.size() && p.used_by_device[dev] > 0)
      users.emplace_back(p.used_by_device[dev], &p);
  }
  std::sort(users.begin(), users.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string top;
  for (std::size_t i = 0; i < users.size() && i < 3; ++i) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%spid %d %s %.1f MiB", i ? ", " : "", users[i].second->pid,
                  users[i].second->command.c_str(), static_cast<double>(users[i].first) / (1 << 20));
    top += buf;
  }
  return top;
}

void report_refusal(const DeviceState& d, std::uint64_t bytes) {
  std::string top = top_users(d);
  profiler::log_refused_allocation(d.index, bytes, effective_quota(d), ledger()->used(d.ledger_dev),
                                   top.empty() ? nullptr : top.c_str());
}

struct NvmlProcessList {
  static constexpr unsigned kCapacity = 256;
  nvmlProcessInfo_t infos[kCapacity];
  unsigned count = 0;
  bool contains(unsigned pid) const {
    for (unsigned i = 0; i < count; ++i)
      if (infos[i].pid == pid) return true;
    return false;
  }
};

bool list_device_processes(const DeviceState& d, NvmlProcessList& out) {
  out.count = NvmlProcessList::kCapacity;
  return driver_ops().device_processes(d.uuid, out.infos, &out.count);
}

unsigned nvml_pid_or_own() {
  unsigned pid = g_nvml_pid.load(std::memory_order_relaxed);
  return pid != 0 ? pid : static_cast<unsigned>(getpid());
}

std::uint64_t format_bytes(CUarray_format f) {
  switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    default:
      return 4;  // 32-bit formats; an unknown (newer) format is counted as 4 bytes per channel
  }
}

}  // namespace

bool own_driver_figure(const DeviceState& d, std::uint64_t* bytes) {
  NvmlProcessList list;
  if (!list_device_processes(d, list)) return false;
  const unsigned pid = nvml_pid_or_own();
  for (unsigned i = 0; i < list.count; ++i) {
    if (list.infos[i].pid == pid) {
      *bytes = list.infos[i].usedGpuMemory;
      return true;
    }
  }
  return false;
}

ImportLook look_before_import() {
  ImportLook look;
  DeviceState* d = current_device_state();
  if (d == nullptr || d->ledger_dev < 0 || d->ledger_dev >= kRecordCount) return look;
  look.device = d;
  look.done_before = g_allocs_done.load(std::memory_order_acquire);
  // Only this open in flight: anything else moving the figure meanwhile would be taken for it.
  look.ok = g_allocs_in_flight.load(std::memory_order_acquire) == 1 && own_driver_figure(*d, &look.before);
  return look;
}

void settle_import(const ImportLook& look, CUresult result, std::uint64_t ptr) {
  if (look.device == nullptr || !look.ok || result != CUDA_SUCCESS) return;
  std::uint64_t after = 0;
  if (!own_driver_figure(*look.device, &after) || g_allocs_in_flight.load(std::memory_order_acquire) != 1 ||
      g_allocs_done.load(std::memory_order_acquire) != look.done_before)
    return;
  if (after <= look.before) return;  // the driver does not count it here: nothing to leave out
  const std::uint64_t grew = after - look.before;
  const int dev = look.device->ledger_dev;
  g_imported_counted[dev].fetch_add(grew, std::memory_order_acq_rel);
  track_allocation(AllocKind::IpcImport, ptr, AllocEntry{grew, dev});
}

void close_imported(std::uint64_t ptr) {
  std::optional<AllocEntry> entry = untrack_allocation(AllocKind::IpcImport, ptr);
  if (entry && entry->ledger_dev >= 0 && entry->ledger_dev < kRecordCount)
    g_imported_counted[entry->ledger_dev].fetch_sub(entry->bytes, std::memory_order_acq_rel);
}

std::uint64_t imported_counted(int ledger_dev) {
  if (ledger_dev < 0 || ledger_dev >= kRecordCount) return 0;
  return g_imported_counted[ledger_dev].load(std::memory_order_acquire);
}

std::uint64_t array_bytes(std::uint64_t w, std::uint64_t h, std::uint64_t depth, CUarray_format f,
                          unsigned channels) {
  auto at_least_1 = [](std::uint64_t v) { return v == 0 ? 1 : v; };
  return at_least_1(w) * at_least_1(h) * at_least_1(depth) * format_bytes(f) * at_least_1(channels);
}

namespace {

// Close to the quota the driver's figure decides: what no hook saw is charged first (at most every
// 10 ms per process), and a reservation stands only while the container stays within its quota.
bool still_within_quota(DeviceState& d, shm::Ledger* l) {
  const std::uint64_t quota = effective_quota(d);
  if (quota == shm::kUnlimited) return true;
  const std::uint64_t used = l->used(d.ledger_dev);
  const std::uint64_t margin = quota / 16 > (64ULL << 20) ? quota / 16 : (64ULL << 20);
  if (used + margin <= quota) return true;
  static std::atomic<std::uint64_t> last_ns{0};
  const std::uint64_t now = monotonic_ns();
  std::uint64_t prev = last_ns.load(std::memory_order_relaxed);
  if (d.has_context.load(std::memory_order_relaxed) && now - prev >= 10000000ULL &&
      last_ns.compare_exchange_strong(prev, now))
    reconcile_context_footprint(d);
  return l->used(d.ledger_dev) <= quota;
}

}  // namespace

void refuse(DeviceState& d, std::uint64_t bytes) {
  ledger()->count_refusal(d.ledger_dev);
  report_refusal(d, bytes);
}

Reservation reserve(DeviceState* d, std::uint64_t bytes) {
  if (d == nullptr || d->ledger_dev < 0) return {};
  shm::Ledger* l = ledger();
  // Room for the footprint growth measured between two reconciliations (0 while it is steady).
  const std::uint64_t headroom = d->footprint_headroom.load(std::memory_order_relaxed);
  bool granted = l->try_reserve(d->ledger_dev, bytes + headroom);
  if (granted && headroom != 0) l->release(d->ledger_dev, headroom);
  if (granted && !still_within_quota(*d, l)) {
    l->release(d->ledger_dev, bytes);
    granted = false;
  }
  // What the graph pool keeps beyond what graphs use goes back to the device before a refusal.
  if (!granted && trim_graph_pool(*d)) granted = l->try_reserve(d->ledger_dev, bytes);
  if (!granted) {
    l->count_refusal(d->ledger_dev);
    report_refusal(*d, bytes);
    return {-1, 0, true};
  }
  return {d->ledger_dev, bytes, false};
}

void settle(const Reservation& r, CUresult result, AllocKind kind, std::uint64_t key) {
  if (r.ledger_dev < 0) return;
  if (result == CUDA_SUCCESS) {
    track_allocation(kind, key, AllocEntry{r.bytes, r.ledger_dev});
  } else {
    ledger()->release(r.ledger_dev, r.bytes);
  }
}

std::uint64_t effective_quota(const DeviceState& d) {
  return d.ledger_dev < 0 ? shm::kUnlimited : ledger()->quota(d.ledger_dev);
}

void ContextProbe::before_creation(DeviceState& d) {
  armed_ = false;
  if (d.has_context.load(std::memory_order_relaxed) || g_nvml_pid.load(std::memory_order_relaxed) != 0)
    return;
  count_ = 0;
  NvmlProcessList list;
  if (!list_device_processes(d, list)) return;
  for (unsigned i = 0; i < list.count && count_ < kCapacity; ++i) pids_[count_++] = list.infos[i].pid;
  armed_ = true;
}

void ContextProbe::after_creation(DeviceState& d) {
  if (!armed_ || g_nvml_pid.load(std::memory_order_relaxed) != 0) return;
  NvmlProcessList list;
  if (!list_device_processes(d, list)) return;
  auto own = static_cast<unsigned>(getpid());
  auto from_proc = static_cast<unsigned>(shm::detect_host_pid());
  unsigned found = 0;
  if (list.contains(own)) {
    found = own;
  } else if (from_proc != 0 && list.contains(from_proc)) {
    found = from_proc;
  } else {
    // The one pid that appeared with our context. Another process starting at the same moment
    // makes it ambiguous; then the footprint is not charged (allocations still are).
    unsigned appeared = 0, candidates = 0;
    for (unsigned i = 0; i < list.count; ++i) {
      bool before = false;
      for (unsigned j = 0; j < count_ && !before; ++j) before = pids_[j] == list.infos[i].pid;
      if (!before) {
        appeared = list.infos[i].pid;
        ++candidates;
      }
    }
    if (candidates == 1)
      found = appeared;
    else
      GS_LOG(Debug, "%u processes appeared in NVML with our context: host pid unknown", candidates);
  }
  if (found == 0) return;
  g_nvml_pid.store(found, std::memory_order_relaxed);
  if (found != own) {
    GS_LOG(Debug, "NVML knows this process (pid %u here) as pid %u", own, found);
    if (ledger() != nullptr) ledger()->set_host_pid(static_cast<int>(found));
  }
}

namespace {

double mib(std::uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// While the driver's figure for the container is at or over the quota every reservation is refused
// (the books hold that figure); one line says so, naming what took this process's memory.
void say_if_over_quota(DeviceState& d) {
  const std::uint64_t quota = effective_quota(d);
  if (quota == shm::kUnlimited) return;
  const std::uint64_t used = ledger()->used(d.ledger_dev);
  if (used < quota) {
    d.over_quota_said.store(false, std::memory_order_relaxed);
    return;
  }
  if (d.over_quota_said.exchange(true, std::memory_order_relaxed)) return;
  const std::uint64_t measured = d.context_measured.load(std::memory_order_relaxed);
  const std::uint64_t footprint = d.context_charge.load(std::memory_order_relaxed);
  GS_LOG(
      Warn,
      "device %d: the container's books hold %.1f MiB (what the driver holds, and what was charged before it "
      "takes it), quota %.1f MiB: allocations are refused "
      "until "
      "it is below. This process: heap %.1f MiB, stack %.1f MiB, printf+launches %.1f MiB, graph pool %.1f "
      "MiB, modules %.1f MiB, context %.1f MiB, unexplained %.1f MiB",
      d.index, mib(used), mib(quota), mib(d.limit_charge[CU_LIMIT_MALLOC_HEAP_SIZE].load()),
      mib(d.limit_charge[CU_LIMIT_STACK_SIZE].load()),
      mib(d.limit_charge[CU_LIMIT_PRINTF_FIFO_SIZE].load() +
          d.limit_charge[CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT].load()),
      mib(d.graph_charge.load()), mib(d.module_charge.load()),
      mib(footprint < measured ? footprint : measured), mib(footprint > measured ? footprint - measured : 0));
}

}  // namespace

namespace {
constexpr std::uint64_t kSlackBytes = 2ULL << 20;  // below allocation granularity: not worth a change
}  // namespace

FootprintResult reconcile_context_footprint(DeviceState& d) {
  // NVML's per-process figure covers everything the driver holds for us: the context, module
  // images, pool caches, reservations and allocation rounding. Whatever exceeds our books is charged,
  // even past the quota: the driver's figure is the truth, the books are the fast path.
  shm::Ledger* l = ledger();
  NvmlProcessList list;
  // The books never hold less than the driver for what the hooks saw (a reservation is booked before
  // the driver allocates, a free given back after it freed), so with allocations moving meanwhile
  // the larger look at the books gives a footprint that is never too big: it may only grow then.
  const std::uint64_t done_before = g_allocs_done.load(std::memory_order_acquire);
  const bool idle_before = g_allocs_in_flight.load(std::memory_order_acquire) == 0;
  const std::uint64_t self_before = l->used_by_self(d.ledger_dev);
  if (!list_device_processes(d, list)) return FootprintResult::NotListed;
  const std::uint64_t self_after = l->used_by_self(d.ledger_dev);
  const bool steady = idle_before && self_before == self_after &&
                      g_allocs_in_flight.load(std::memory_order_acquire) == 0 &&
                      g_allocs_done.load(std::memory_order_acquire) == done_before;
  unsigned pid = nvml_pid_or_own();
  for (unsigned i = 0; i < list.count; ++i) {
    if (list.infos[i].pid != pid) continue;
    std::uint64_t charge = d.context_charge.load(std::memory_order_relaxed);
    const std::uint64_t self = self_before > self_after ? self_before : self_after;
    // Module globals charged at the load but not taken yet (lazy loading) are not in the driver's
    // figure: left out of what the hooks saw until they come due.
    const std::uint64_t prepaid = d.module_prepaid.load(std::memory_order_relaxed);
    std::uint64_t tracked = self > charge + prepaid ? self - charge - prepaid : 0;
    // Another process's memory opened here is that process's charge, even if the driver counts it.
    std::uint64_t reported = list.infos[i].usedGpuMemory;
    const std::uint64_t imported = imported_counted(d.ledger_dev);
    reported = reported > imported ? reported - imported : 0;
    std::uint64_t target = reported > tracked ? reported - tracked : 0;
    // Growth no hook measured is the owed globals coming due first (a first launch not measured).
    if (target > charge + kSlackBytes && prepaid != 0) {
      std::uint64_t owed = prepaid;
      std::uint64_t taken = 0;
      do {
        taken = owed < target - charge ? owed : target - charge;
      } while (!d.module_prepaid.compare_exchange_weak(owed, owed - taken));
      target -= taken;
    }
    const bool first = d.context_measured.load(std::memory_order_relaxed) == 0;
    if (target > charge + kSlackBytes) {
      l->charge_held(d.ledger_dev, target - charge);
      d.context_charge.store(target);
      // Growth between two looks is what the next interval may bring too: kept as headroom.
      if (!first) {
        const std::uint64_t growth = target - charge;
        if (growth > d.footprint_headroom.load(std::memory_order_relaxed))
          d.footprint_headroom.store(growth, std::memory_order_relaxed);
      }
    } else if (steady && target + kSlackBytes < charge) {
      l->release(d.ledger_dev, charge - target);
      d.context_charge.store(target);
    }
    if (first && steady && target != 0) {
      d.context_measured.store(target, std::memory_order_relaxed);
      l->note_context_footprint(d.ledger_dev, target);
    }
    // The headroom fades (about half a second's worth per second) once the footprint stops growing.
    const std::uint64_t headroom = d.footprint_headroom.load(std::memory_order_relaxed);
    d.footprint_headroom.store(headroom - headroom / 16, std::memory_order_relaxed);
    say_if_over_quota(d);
    return steady ? FootprintResult::Booked : FootprintResult::Skipped;
  }
  return FootprintResult::NotListed;
}

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
  if (charge <= mark + kSlackBytes) return;
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

namespace memory_books {

void tick(unsigned tick_number) {
  if (tick_number % 2 == 0) ledger()->reap_dead();
  // Under a quota the driver's figure is looked at every tick (100 ms); without one, for the views.
  if (!memory_active() && tick_number % 5 != 0) return;
  for_each_ready_device([](DeviceState& d) {
    if (d.ledger_dev < 0 || !d.has_context.load(std::memory_order_relaxed)) return;
    if (memory_active()) sync_graph_charge(d);
    reconcile_context_footprint(d);
  });
}

void after_fork() {
  clear_allocation_tables_after_fork();
  if (Runtime* rt = runtime()) {
    for (DeviceState& d : rt->devices) {
      d.context_charge.store(0);
      d.context_mark.store(0);
      d.has_context.store(false);
    }
  }
  g_nvml_pid.store(0, std::memory_order_relaxed);  // the child's host pid is not its parent's
  for (auto& refs : g_primary_refs) refs.store(0, std::memory_order_relaxed);  // no context of the parent's
  for (auto& imported : g_imported_counted) imported.store(0, std::memory_order_relaxed);
  libraries_after_fork();
}

}  // namespace memory_books
}  // namespace gpuslice::interposer
