#include "shared_state/ledger_view.h"

#include <fcntl.h>

#include <cstring>
#include <vector>

#include "common/clock.h"
#include "common/errno_text.h"
#include "common/log.h"

namespace gpuslice::shm::detail {
namespace {

using namespace layout;

// A claim not finished within this time belongs to a claimer that died before taking its lock.
constexpr std::uint64_t kStaleClaimSeconds = 2;
// A reap not finished within this time belongs to a reaper that died mid-way.
constexpr std::uint64_t kStaleReapSeconds = 10;

std::uint64_t seconds_since(std::uint64_t then_30bit, std::uint64_t now) {
  return (now - then_30bit) & 0x3FFFFFFFULL;
}

bool uuid_equal(const char* stored, std::string_view uuid) {
  std::size_t n = strnlen(stored, kUuidBytes);
  if (n != uuid.size()) return false;
  for (std::size_t i = 0; i < n; ++i) {
    char a = stored[i], b = uuid[i];
    if (a >= 'A' && a <= 'Z') a = static_cast<char>(a - 'A' + 'a');
    if (b >= 'A' && b <= 'Z') b = static_cast<char>(b - 'A' + 'a');
    if (a != b) return false;
  }
  return true;
}

std::string read_command(const Slot& s) {
  char text[kCommandWords * 8 + 1] = {};
  for (std::size_t w = 0; w < kCommandWords; ++w) {
    std::uint64_t word = s.command[w].load(std::memory_order_relaxed);
    std::memcpy(text + w * 8, &word, 8);
  }
  return std::string(text, strnlen(text, sizeof text - 1));
}

}  // namespace

std::uint64_t monotonic_seconds() { return monotonic_ns() / 1000000000ULL; }

LedgerView LedgerView::over(void* base) {
  auto* bytes = static_cast<unsigned char*>(base);
  LedgerView view;
  view.header = reinterpret_cast<Header*>(bytes);
  view.devices = reinterpret_cast<DeviceRecord*>(bytes + kDevicesOffset);
  view.slots = reinterpret_cast<Slot*>(bytes + kSlotsOffset);
  return view;
}

bool LedgerView::device_ready(int dev) const {
  return dev >= 0 && dev < static_cast<int>(kMaxDeviceRecords) &&
         devices[dev].state.load(std::memory_order_acquire) == kDeviceReady;
}

std::uint32_t LedgerView::high_water() const {
  std::uint32_t high = header->slot_high_water.load();
  return high > kMaxSlots ? kMaxSlots : high;
}

std::uint64_t LedgerView::used(int dev) const {
  if (!device_ready(dev)) return 0;
  std::uint32_t high = high_water();
  // Every `granted` first, then every `returned`: the difference is at most what the container
  // held at the moment between the two passes, so it never overstates usage.
  std::uint64_t granted = 0, returned = 0;
  for (std::uint32_t i = 0; i < high; ++i) granted += slots[i].devices[dev].granted.load();
  for (std::uint32_t i = 0; i < high; ++i) returned += slots[i].devices[dev].returned.load();
  std::uint64_t used_bytes = granted - returned;
  // Wrapped below zero: frees landed between the passes; nothing is held that we can prove.
  return used_bytes > (kUnlimited >> 1) ? 0 : used_bytes;
}

int LedgerView::find_device(std::string_view uuid) const {
  for (std::uint32_t i = 0; i < kMaxDeviceRecords; ++i) {
    const DeviceRecord& r = devices[i];
    if (r.state.load(std::memory_order_acquire) == kDeviceReady && uuid_equal(r.uuid, uuid)) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

int LedgerView::device_count() const {
  int n = 0;
  for (std::uint32_t i = 0; i < kMaxDeviceRecords; ++i) {
    if (devices[i].state.load(std::memory_order_acquire) == kDeviceReady) ++n;
  }
  return n;
}

void recompute_limits(layout::DeviceRecord& r) {
  for (;;) {
    const std::uint64_t requested_quota = r.requested_quota.load();
    const std::uint64_t quota_cap = r.quota_cap.load();
    const std::uint32_t requested_compute = r.requested_compute.load();
    const std::uint32_t compute_cap = r.compute_cap.load();
    r.quota.store(effective_quota(requested_quota, quota_cap));
    r.compute_limit.store(effective_compute(requested_compute, compute_cap));
    if (r.requested_quota.load() == requested_quota && r.quota_cap.load() == quota_cap &&
        r.requested_compute.load() == requested_compute && r.compute_cap.load() == compute_cap)
      return;
  }
}

Snapshot LedgerView::snapshot(const std::string& path) const {
  Snapshot snap;
  snap.path = path;
  snap.priority = priority_from_value(header->priority.load());
  snap.held_back_ns = header->held_back_ns.load();
  snap.node_channel_refused = header->node_channel_refused.load() != 0;
  snap.assigned_priority = priority_from_value(header->assigned_priority.load());
  snap.assignment_refused = header->assignment_refused.load() != 0;
  std::vector<int> records;
  for (std::uint32_t r = 0; r < kMaxDeviceRecords; ++r) {
    const DeviceRecord& d = devices[r];
    if (d.state.load(std::memory_order_acquire) != kDeviceReady) continue;
    DeviceRow row;
    row.uuid.assign(d.uuid, strnlen(d.uuid, kUuidBytes));
    row.index = d.cuda_index;
    row.total_bytes = d.total_bytes;
    row.quota = d.quota.load();
    row.compute_limit = d.compute_limit.load();
    row.requested = {d.requested_quota.load(), d.requested_compute.load(),
                     header->requested_guarantee[r].load()};
    row.cap = {d.quota_cap.load(), d.compute_cap.load(), header->guarantee_cap[r].load()};
    row.guarantee = effective_guarantee(row.requested.guarantee, row.cap.guarantee, row.quota);
    row.used = used(static_cast<int>(r));
    row.refused_allocations = d.refused_allocations.load();
    row.reclaim_episodes = header->reclaim_episodes[r].load();
    row.reclaim_ns = header->reclaim_ns[r].load();
    row.reclaim_bytes = header->reclaim_bytes[r].load();
    row.record = static_cast<int>(r);
    snap.devices.push_back(std::move(row));
    records.push_back(static_cast<int>(r));
  }
  std::uint32_t high = high_water();
  for (std::uint32_t i = 0; i < high; ++i) {
    const Slot& s = slots[i];
    std::uint64_t word = s.state.load();
    if (slot_state(word) != kSlotActive) continue;
    ProcessRow row;
    row.pid = s.pid.load();
    row.host_pid = s.host_pid.load();
    row.command = read_command(s);
    for (int r : records) {
      const SlotDeviceCounters& c = s.devices[r];
      std::uint64_t granted = c.granted.load();
      std::uint64_t held = granted - c.returned.load();
      row.used_by_device.push_back(held > (kUnlimited >> 1) ? 0 : held);
      row.busy_ns_by_device.push_back(c.busy_ns.load());
    }
    const std::uint64_t borrowed = s.borrowed_bytes.load(std::memory_order_relaxed);
    const std::uint64_t on_host = s.on_host_bytes.load(std::memory_order_relaxed);
    const std::uint64_t reclaim_record = s.reclaim_record.load(std::memory_order_relaxed);
    // Reaped and reused while we read: the row would mix two processes.
    if (s.state.load() != word) continue;
    for (DeviceRow& device : snap.devices) {
      if (reclaim_record == 0 || static_cast<std::uint64_t>(device.record) + 1 != reclaim_record) continue;
      device.borrowed_bytes += borrowed;
      device.on_host_bytes += on_host;
    }
    row.slot = static_cast<int>(i);
    snap.processes.push_back(std::move(row));
  }
  return snap;
}

int LedgerView::reap_dead(int fd, int own_slot, const std::string& path) const {
  std::uint32_t high = high_water();
  std::uint64_t now = monotonic_seconds();
  int reaped = 0;
  for (std::uint32_t i = 0; i < high; ++i) {
    if (static_cast<int>(i) == own_slot) continue;
    Slot& s = slots[i];
    std::uint64_t word = s.state.load();
    switch (slot_state(word)) {
      case kSlotFree:
        break;
      case kSlotClaiming:
        if (seconds_since(slot_claim_second(word), now) >= kStaleClaimSeconds &&
            !slot_lock_held(fd, i, path)) {
          s.state.compare_exchange_strong(word, slot_word(slot_generation(word), 0, kSlotFree));
        }
        break;
      case kSlotActive:
        if (!slot_lock_held(fd, i, path) &&
            s.state.compare_exchange_strong(word, slot_word(slot_generation(word), now, kSlotReaping))) {
          return_slot(i, slot_word(slot_generation(word), now, kSlotReaping));
          ++reaped;
        }
        break;
      case kSlotReaping:
        if (seconds_since(slot_claim_second(word), now) >= kStaleReapSeconds &&
            s.state.compare_exchange_strong(word, slot_word(slot_generation(word), now, kSlotReaping))) {
          return_slot(i, slot_word(slot_generation(word), now, kSlotReaping));
        }
        break;
    }
  }
  return reaped;
}

void LedgerView::return_slot(std::uint32_t index, std::uint64_t word) const {
  Slot& s = slots[index];
  for (std::uint32_t d = 0; d < kMaxDeviceRecords; ++d) {
    SlotDeviceCounters& c = s.devices[d];
    // Committed usage first (returned catches up with granted), then admission room.
    c.returned.store(c.granted.load());
    c.charged.store(0);
    c.busy_ns.store(0, std::memory_order_relaxed);
  }
  s.pid.store(0);
  s.host_pid.store(0);
  for (auto& w : s.command) w.store(0, std::memory_order_relaxed);
  s.borrowed_bytes.store(0, std::memory_order_relaxed);
  s.on_host_bytes.store(0, std::memory_order_relaxed);
  s.reclaim_record.store(0, std::memory_order_relaxed);
  s.state.compare_exchange_strong(word, slot_word(slot_generation(word), 0, kSlotFree));
}

bool slot_lock_held(int fd, std::uint32_t index, const std::string& path) {
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = static_cast<off_t>(slot_lock_offset(index));
  fl.l_len = 1;
  if (fcntl(fd, F_OFD_GETLK, &fl) != 0) {
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true)) {
      GS_LOG(Error, "cannot query slot locks of %s (%s): dead processes will not be reaped", path.c_str(),
             fs::errno_text(errno).c_str());
    }
    return true;
  }
  return fl.l_type != F_UNLCK;
}

}  // namespace gpuslice::shm::detail
