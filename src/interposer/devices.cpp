#include "interposer/devices.h"

#include <sched.h>
#include <sys/stat.h>

#include <cinttypes>
#include <cstdio>

#include "common/log.h"
#include "config/limits_file.h"
#include "interposer/core_driver.h"

namespace gpuslice::interposer {
namespace {

void format_uuid(const CUuuid& u, char* out, std::size_t len) {
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  std::snprintf(out, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                b[15]);
}

shm::DeviceLimits lookup(const config::DeviceValues& memory, const config::DeviceValues& compute,
                         const config::DeviceValues& guarantee, int index, const char* uuid) {
  shm::DeviceLimits limits;
  if (auto bytes = memory.lookup(index, uuid)) limits.quota = *bytes;
  if (auto percent = compute.lookup(index, uuid)) limits.compute = static_cast<unsigned>(*percent);
  if (auto bytes = guarantee.lookup(index, uuid)) limits.guarantee = *bytes;
  return limits;
}

shm::DeviceLimits requested_limits(const config::Settings& s, int index, const char* uuid) {
  return lookup(s.memory, s.compute, s.guarantee, index, uuid);
}
shm::DeviceLimits capped_limits(const config::Settings& s, int index, const char* uuid) {
  return lookup(s.memory_cap, s.compute_cap, s.guarantee_cap, index, uuid);
}

class LimitsLock {
 public:
  explicit LimitsLock(Runtime& rt) : flag_(rt.limits_lock) {
    while (flag_.exchange(true, std::memory_order_acquire)) sched_yield();
  }
  ~LimitsLock() { flag_.store(false, std::memory_order_release); }
  LimitsLock(const LimitsLock&) = delete;
  LimitsLock& operator=(const LimitsLock&) = delete;

 private:
  std::atomic<bool>& flag_;
};

void remember(Runtime& rt, int ledger_dev, int index, const char* uuid) {
  for (int i = 0; i < rt.attached_count; ++i)
    if (rt.attached[i].ledger_dev == ledger_dev) return;
  if (rt.attached_count == kMaxDevices) return;
  AttachedRecord& r = rt.attached[rt.attached_count++];
  r.ledger_dev = ledger_dev;
  r.index = index;
  std::snprintf(r.uuid, sizeof r.uuid, "%s", uuid);
}

bool any(const shm::DeviceLimits& l) {
  return l.quota != shm::kUnlimited || l.compute != shm::kNoComputeLimit;
}

// Describes device `dev` and attaches its ledger record; the phase it ends in.
DevicePhase attach(Runtime& rt, CUdevice dev) {
  DeviceState& d = rt.devices[dev];
  CUuuid uuid{};
  std::size_t total = 0;
  const CoreDriver& ops = core_driver();
  if (ops.device_uuid(&uuid, dev) != CUDA_SUCCESS || ops.device_total_mem(&total, dev) != CUDA_SUCCESS)
    return DevicePhase::Unusable;
  d.index = dev;
  format_uuid(uuid, d.uuid, sizeof d.uuid);
  d.physical_total = total;
  const int ledger_dev = attach_limits(d.uuid, dev, total);
  if (ledger_dev == -2) return DevicePhase::Unusable;
  d.ledger_dev = ledger_dev;
  if (ledger_dev >= 0 && rt.capped_late.load(std::memory_order_relaxed))
    d.has_context.store(true, std::memory_order_relaxed);
  if (ledger_dev >= 0) {
    GS_LOG(Info, "device %d (%s): quota %" PRIu64 " bytes, compute %u%%", dev, d.uuid,
           ledger()->quota(ledger_dev), ledger()->compute_limit(ledger_dev));
  }
  return DevicePhase::Ready;
}

}  // namespace

int attach_limits(const char* uuid, int cuda_index, std::uint64_t physical_total) {
  Runtime* rt = runtime();
  shm::Ledger* const books = rt != nullptr ? rt->ledger.load(std::memory_order_acquire) : nullptr;
  if (books == nullptr) return -1;
  LimitsLock lock(*rt);
  const config::Settings& s = rt->settings;
  const shm::DeviceLimits requested = requested_limits(s, cuda_index, uuid);
  const shm::DeviceLimits cap = capped_limits(s, cuda_index, uuid);
  if (!any(requested) && !any(cap)) return -1;
  auto attached = books->attach_device(uuid, cuda_index, physical_total, requested.quota, requested.compute);
  if (!attached) {
    GS_LOG(Error, "cannot attach device %s to %s: %s", uuid, s.shared_file.c_str(), attached.error().c_str());
    return -2;
  }
  const int dev = attached.value();
  // A process asking for less memory than the container's record tightens the request; a looser
  // one does not loosen it (another process of the container may rely on it). Either way the
  // process runs with a quota other than the one it asked for: say so.
  const std::uint64_t recorded = books->requested(dev).quota;
  if (requested.quota != recorded && requested.quota != shm::kUnlimited) {
    GS_LOG(Warn,
           "device %d (%s): this process asks for a memory quota of %" PRIu64
           " bytes, the container (%s) "
           "has %" PRIu64
           "; the container's processes share one quota: %s applies (change it with "
           "'gpuslice set --memory')",
           cuda_index, uuid, requested.quota, s.shared_file.c_str(), recorded,
           requested.quota < recorded ? "the smaller one" : "the container's");
  }
  if (requested.quota < recorded) books->set_quota(dev, requested.quota);
  books->set_caps(dev, cap);
  // Kept beside the limit for now; enforcement is unchanged (docs/quota.md, "Guarantees and borrowing").
  if (requested.guarantee != 0) books->set_guarantee(dev, requested.guarantee);
  remember(*rt, dev, cuda_index, uuid);
  return dev;
}

bool named_devices_exist() {
  Runtime* rt = runtime();
  int count = 0;
  const CoreDriver& ops = core_driver();
  if (rt == nullptr || ops.device_count == nullptr || ops.device_count(&count) != CUDA_SUCCESS) return true;
  const config::Settings& s = rt->settings;
  // With CUDA_VISIBLE_DEVICES a process chose to see part of the container's devices (a launcher's
  // worker, say): the container's other limits are not its concern, so only say so.
  const bool subset = !s.visible_devices.empty();
  bool all_exist = true;
  for (const config::NamedOrdinal& named : s.named_ordinals) {
    if (named.ordinal < count) continue;
    if (subset) {
      GS_LOG(Warn,
             "%s='%s' names CUDA device %d, but CUDA_VISIBLE_DEVICES='%s' shows this process %d device(s)",
             named.variable.c_str(), named.value.c_str(), named.ordinal, s.visible_devices.c_str(), count);
      continue;
    }
    GS_LOG(Error,
           "invalid configuration: %s='%s': names CUDA device %d, but this process sees %d device(s) "
           "(per-device limits count the devices the process sees); CUDA calls will fail until it is fixed",
           named.variable.c_str(), named.value.c_str(), named.ordinal, count);
    all_exist = false;
  }
  return all_exist;
}

bool guarantees_within_limits() {
  Runtime* rt = runtime();
  const CoreDriver& ops = core_driver();
  if (rt == nullptr) return true;
  const config::Settings& s = rt->settings;
  if (s.guarantee.empty() && s.guarantee_cap.empty()) return true;
  int count = 0;
  if (ops.device_count == nullptr || ops.device_uuid == nullptr || ops.device_count(&count) != CUDA_SUCCESS)
    return true;
  bool within = true;
  for (CUdevice dev = 0; dev < count && dev < kMaxDevices; ++dev) {
    CUuuid raw{};
    if (ops.device_uuid(&raw, dev) != CUDA_SUCCESS) continue;
    char uuid[sizeof(DeviceState::uuid)];
    format_uuid(raw, uuid, sizeof uuid);
    // The request against the request, the file's cap against the file's: what the settings and the
    // file's parser could not match (one keyed by index, the other by UUID).
    const shm::DeviceLimits requested = requested_limits(s, dev, uuid);
    const shm::DeviceLimits cap = capped_limits(s, dev, uuid);
    const bool asked = requested.guarantee > requested.quota;
    if (!asked && cap.guarantee <= cap.quota) continue;
    GS_LOG(Error,
           "invalid configuration: device %d (%s): %s memory guarantee of %" PRIu64
           " bytes is above its memory limit of %" PRIu64
           " bytes (%s vs %s): a guarantee is at most the limit; CUDA calls will fail until it is fixed",
           dev, uuid, asked ? "GPUSLICE_MEMORY_GUARANTEE's" : "the limits file's",
           asked ? requested.guarantee : cap.guarantee, asked ? requested.quota : cap.quota,
           asked ? "GPUSLICE_MEMORY_GUARANTEE" : config::kMemoryGuaranteeKey,
           asked ? "GPUSLICE_MEMORY_LIMIT" : config::kMemoryLimitKey);
    within = false;
  }
  return within;
}

DeviceState* device_state(CUdevice dev) {
  Runtime* rt = runtime();
  if (dev < 0 || dev >= kMaxDevices || rt == nullptr) return nullptr;
  std::atomic<DevicePhase>& phase = rt->phases[dev];
  DevicePhase p = phase.load(std::memory_order_acquire);
  if (p == DevicePhase::Ready) [[likely]]
    return &rt->devices[dev];
  if (p == DevicePhase::Unusable) return nullptr;
  DevicePhase expected = DevicePhase::Unknown;
  if (!phase.compare_exchange_strong(expected, DevicePhase::Attaching)) {
    while ((p = phase.load(std::memory_order_acquire)) == DevicePhase::Attaching) sched_yield();
    return p == DevicePhase::Ready ? &rt->devices[dev] : nullptr;
  }
  p = attach(*rt, dev);
  phase.store(p, std::memory_order_release);
  return p == DevicePhase::Ready ? &rt->devices[dev] : nullptr;
}

DeviceState* device_state_if_attached(CUdevice dev) {
  Runtime* rt = runtime();
  if (dev < 0 || dev >= kMaxDevices || rt == nullptr) return nullptr;
  return rt->phases[dev].load(std::memory_order_acquire) == DevicePhase::Ready ? &rt->devices[dev] : nullptr;
}

DeviceState* current_device_state(CUdevice* out_dev) {
  CUdevice dev = 0;
  if (core_driver().current_device(&dev) != CUDA_SUCCESS) return nullptr;
  if (out_dev != nullptr) *out_dev = dev;
  return device_state(dev);
}

bool refresh_limits_file() {
  Runtime* rt = runtime();
  if (rt == nullptr) return false;
  shm::Ledger* const books = rt->ledger.load(std::memory_order_acquire);
  config::Settings& s = rt->settings;
  if (s.limits_file.empty()) return false;
  struct stat st {};
  const bool present = stat(s.limits_file.c_str(), &st) == 0;
  if (!present) st = {};
  const off_t size = present ? st.st_size : -1;
  const bool same =
      st.st_mtim.tv_sec == rt->limits_mtime.tv_sec && st.st_mtim.tv_nsec == rt->limits_mtime.tv_nsec &&
      st.st_ctim.tv_sec == rt->limits_ctime.tv_sec && st.st_ctim.tv_nsec == rt->limits_ctime.tv_nsec &&
      st.st_ino == rt->limits_inode && size == rt->limits_size;
  if (!same) {
    auto limits = config::read_limits_file(s.limits_file);
    if (!present && s.limits_file_required) {
      GS_LOG(Error, "limits file %s vanished, though the node daemon wrote it (keeping the previous limits)",
             s.limits_file.c_str());
    } else if (!limits) {
      // Empty counts as malformed: a tool that truncates before writing must not lift the caps.
      GS_LOG(Error, "%s (keeping the previous limits)", limits.error().c_str());
    } else if (limits->missing) {
      // Gone for a moment (a rewrite that is not a rename) or for good: caps are lifted only by a
      // file that says so, so the ones in force stay.
      if (!s.memory_cap.empty() || !s.compute_cap.empty()) {
        GS_LOG(Warn,
               "limits file %s disappeared; keeping its caps until it is back (write %s=%s to lift them)",
               s.limits_file.c_str(), config::kMemoryLimitKey, config::kNoCap);
      }
    } else if (books == nullptr) {
      // No ledger yet: the caller brings the limits up (and calls again) once the file caps something.
      return limits->memory.has_value() || limits->compute.has_value();
    } else {
      LimitsLock lock(*rt);
      // Devices attached from now on take the new caps from here (attach_limits).
      s.memory_cap = limits->memory ? std::move(limits->memory->values) : config::DeviceValues{};
      s.compute_cap = limits->compute ? std::move(limits->compute->values) : config::DeviceValues{};
      s.guarantee_cap = limits->guarantee ? std::move(limits->guarantee->values) : config::DeviceValues{};
      for (int i = 0; i < rt->attached_count; ++i) {
        const AttachedRecord& r = rt->attached[i];
        books->set_caps(r.ledger_dev, capped_limits(s, r.index, r.uuid));
      }
    }
    rt->limits_mtime = st.st_mtim;
    rt->limits_ctime = st.st_ctim;
    rt->limits_inode = st.st_ino;
    rt->limits_size = size;
  }
  // A device that attached without any limit gets a record once a cap covers it (it had no request,
  // so nothing else can limit it: without caps there is nothing to look at). What it already holds
  // is charged by the next footprint reconciliation (the driver's own figure).
  if (books == nullptr || (s.memory_cap.empty() && s.compute_cap.empty())) return false;
  for_each_ready_device([&s](DeviceState& d) {
    if (d.ledger_dev.load(std::memory_order_relaxed) >= 0) return;
    const int dev = attach_limits(d.uuid, d.index, d.physical_total);
    if (dev < 0) return;
    d.has_context.store(true, std::memory_order_relaxed);
    d.ledger_dev.store(dev, std::memory_order_release);
    GS_LOG(Info, "device %d (%s): capped by %s after it attached", d.index, d.uuid, s.limits_file.c_str());
  });
  // A request turned the memory hooks on at start; a cap that came later turns them on here.
  if (!s.memory_cap.empty()) g_memory_active.store(true, std::memory_order_release);
  return false;
}

}  // namespace gpuslice::interposer
