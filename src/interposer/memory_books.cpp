#include "interposer/memory_books.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/log.h"
#include "interposer/core_driver.h"
#include "interposer/devices.h"
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

// What reserve() gives back to the device before it refuses (memory_books::set_reclaim).
std::atomic<memory_books::Reclaim> g_reclaim{nullptr};

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
  return core_driver().device_processes(d.uuid, out.infos, &out.count);
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
  // What can be given back to the device (the graph pool's unused memory) is, before a refusal.
  if (!granted) {
    const memory_books::Reclaim reclaim = g_reclaim.load(std::memory_order_acquire);
    if (reclaim != nullptr && reclaim(*d)) granted = l->try_reserve(d->ledger_dev, bytes);
  }
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
    if (target > charge + kFootprintSlackBytes && prepaid != 0) {
      std::uint64_t owed = prepaid;
      std::uint64_t taken = 0;
      do {
        taken = owed < target - charge ? owed : target - charge;
      } while (!d.module_prepaid.compare_exchange_weak(owed, owed - taken));
      target -= taken;
    }
    const bool first = d.context_measured.load(std::memory_order_relaxed) == 0;
    if (target > charge + kFootprintSlackBytes) {
      l->charge_held(d.ledger_dev, target - charge);
      d.context_charge.store(target);
      // Growth between two looks is what the next interval may bring too: kept as headroom.
      if (!first) {
        const std::uint64_t growth = target - charge;
        if (growth > d.footprint_headroom.load(std::memory_order_relaxed))
          d.footprint_headroom.store(growth, std::memory_order_relaxed);
      }
    } else if (steady && target + kFootprintSlackBytes < charge) {
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

namespace memory_books {

void tick(unsigned tick_number) {
  if (tick_number % 2 == 0) ledger()->reap_dead();
  // Under a quota the driver's figure is looked at every tick (100 ms); without one, for the views.
  if (!memory_active() && tick_number % 5 != 0) return;
  for_each_ready_device([](DeviceState& d) {
    if (d.ledger_dev < 0 || !d.has_context.load(std::memory_order_relaxed)) return;
    reconcile_context_footprint(d);
  });
}

void set_reclaim(Reclaim reclaim) { g_reclaim.store(reclaim, std::memory_order_release); }

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
  for (auto& imported : g_imported_counted) imported.store(0, std::memory_order_relaxed);
}

}  // namespace memory_books
}  // namespace gpuslice::interposer
