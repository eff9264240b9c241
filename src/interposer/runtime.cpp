#include "interposer/runtime.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <new>

#include "common/clock.h"
#include "common/log.h"
#include "interposer/alloc_table.h"
#include "interposer/hooks.h"
#include "interposer/launch_gate.h"
#include "limiter/compute_limiter.h"
#include "shared_state/proc_identity.h"

namespace gpuslice::interposer {

std::atomic<bool> g_memory_active{false};
std::atomic<bool> g_compute_active{false};
std::atomic<std::uint64_t> g_allocs_in_flight{0};
std::atomic<std::uint64_t> g_allocs_done{0};

namespace {

enum class Phase : int { Uninitialised, Initialising, Ready, Broken };

struct Runtime {
  config::Settings settings;
  shm::Ledger* ledger = nullptr;
  DeviceState devices[kMaxDevices];
  std::atomic<int> device_phase[kMaxDevices] = {};  // 0 unknown, 1 attaching, 2 ready, 3 unusable
  std::string node_dir;             // GPUSLICE_NODE_DIR: turn tables shared by every container
  std::uint64_t container_key = 0;  // identity of this container's state file
  timespec limits_mtime{};
  off_t limits_size = -1;
};

// The limiter's cycle: turns are offsets within it.
constexpr std::uint64_t kTurnPeriodNs = limiter::Tuning{}.period_ns;

std::atomic<int> g_phase{static_cast<int>(Phase::Uninitialised)};
std::atomic<bool> g_forked_child{false};
std::atomic<bool> g_watcher_running{false};
// The pid NVML reports for this process; 0 until known. Usually getpid() (driver 580 answers with
// the caller's namespace pids); where NVML shows host pids instead, it is learnt when this
// process's first context appears (ContextProbe).
std::atomic<unsigned> g_nvml_pid{0};
Runtime* g_rt = nullptr;
thread_local bool t_initialising = false;

void format_uuid(const CUuuid& u, char* out, std::size_t len) {
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  std::snprintf(out, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                b[15]);
}

void sleep_ms(int ms) {
  timespec ts{0, static_cast<long>(ms) * 1000000L};
  nanosleep(&ts, nullptr);
}

// Read-only limits written by the node daemon or operator: re-read when the file changes, so the
// daemon's writes apply live; the file caps whatever the container sets for itself.
void refresh_limits_file(Runtime& rt) {
  const std::string& path = rt.settings.limits_file;
  if (path.empty()) return;
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return;
  if (st.st_mtim.tv_sec == rt.limits_mtime.tv_sec && st.st_mtim.tv_nsec == rt.limits_mtime.tv_nsec &&
      st.st_size == rt.limits_size)
    return;
  rt.limits_mtime = st.st_mtim;
  rt.limits_size = st.st_size;
  config::Settings caps;
  config::apply_limits_file(caps, path);
  if (!caps.ok()) {
    for (const auto& e : caps.errors) GS_LOG(Error, "%s (keeping the previous limits)", e.c_str());
    return;
  }
  for (int i = 0; i < kMaxDevices; ++i) {
    if (rt.device_phase[i].load(std::memory_order_acquire) != 2) continue;
    DeviceState& d = rt.devices[i];
    if (d.ledger_dev < 0) continue;
    auto mem = caps.memory.lookup(i, d.uuid);
    d.file_cap.store(mem ? *mem : shm::kUnlimited, std::memory_order_relaxed);
    if (mem && rt.ledger->quota(d.ledger_dev) != *mem) rt.ledger->set_quota(d.ledger_dev, *mem);
    auto pct = caps.compute.lookup(i, d.uuid);
    if (pct && rt.ledger->compute_limit(d.ledger_dev) != *pct)
      rt.ledger->set_compute_limit(d.ledger_dev, static_cast<unsigned>(*pct));
  }
}

// A compute limit set live (gpuslice set, limits file) on a process started without one turns the
// launch gate on; the limiters read the limit itself from the shared state at every decision.
void refresh_compute_limits(Runtime& rt) {
  bool any = false;
  for (int i = 0; i < kMaxDevices; ++i) {
    if (rt.device_phase[i].load(std::memory_order_acquire) != 2) continue;
    DeviceState& d = rt.devices[i];
    if (d.ledger_dev < 0) continue;
    unsigned pct = rt.ledger->compute_limit(d.ledger_dev);
    if (pct > 0 && pct < 100) any = true;
  }
  if (any || !rt.settings.compute.empty()) g_compute_active.store(true, std::memory_order_relaxed);
}

// Containers with compute limits on the same GPU take turns (see node_turns.h); every process of
// a container refreshes the container's entry and hands its offset to the limiter.
void refresh_turns(Runtime& rt) {
  for (int i = 0; i < kMaxDevices; ++i) {
    if (rt.device_phase[i].load(std::memory_order_acquire) != 2) continue;
    DeviceState& d = rt.devices[i];
    unsigned pct = d.ledger_dev >= 0 ? rt.ledger->compute_limit(d.ledger_dev) : 0;
    if (pct == 0 || pct >= 100 || d.turns_failed || rt.container_key == 0) {
      d.turn_offset.store(shm::kNoTurn, std::memory_order_relaxed);
      continue;
    }
    if (d.turns == nullptr) {
      auto opened = shm::NodeTurns::open(rt.node_dir, d.uuid);
      if (!opened) {
        d.turns_failed = true;
        GS_LOG(Info, "no turns with other containers on %s: %s", d.uuid, opened.error().c_str());
        continue;
      }
      d.turns = std::move(opened).value().release();
    }
    d.turn_offset.store(d.turns->refresh(rt.container_key, pct, kTurnPeriodNs, monotonic_ns()),
                        std::memory_order_relaxed);
  }
}

void* watcher_main(void*) {
  // Reaping, live limits and footprint reconciliation, off the application's threads.
  for (unsigned tick = 1;; ++tick) {
    sleep_ms(100);
    if (g_forked_child.load(std::memory_order_relaxed)) continue;
    Runtime& rt = *g_rt;
    refresh_limits_file(rt);
    refresh_compute_limits(rt);
    if (g_compute_active.load(std::memory_order_relaxed)) {
      publish_compute_usage();
      refresh_turns(rt);
    }
    if (tick % 2 == 0) rt.ledger->reap_dead();
    if (tick % 5 == 0) {
      for (int i = 0; i < kMaxDevices; ++i) {
        if (rt.device_phase[i].load(std::memory_order_acquire) != 2) continue;
        DeviceState& d = rt.devices[i];
        if (d.ledger_dev >= 0 && d.has_context.load(std::memory_order_relaxed))
          reconcile_context_footprint(d);
      }
    }
  }
  return nullptr;
}

void start_watcher() {
  bool expected = false;
  if (!g_watcher_running.compare_exchange_strong(expected, true)) return;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t thread;
  // Signals belong to the application's threads, not ours.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  if (pthread_create(&thread, &attr, watcher_main, nullptr) != 0) {
    g_watcher_running.store(false);
    GS_LOG(Warn, "cannot start the watcher thread: dead processes are reaped only on refusals");
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  pthread_attr_destroy(&attr);
}

void on_fork_child() {
  // Only async-signal-safe work here; the rest happens on the child's next hooked call.
  g_forked_child.store(true, std::memory_order_relaxed);
  g_watcher_running.store(false, std::memory_order_relaxed);
}

void start_profiler(const std::string& dir) {
  static const char* names[kHookCount];
  for (std::size_t i = 0; i < kHookCount; ++i) names[i] = kHooks[i].profile_name;
  if (!profiler::start(dir.c_str(), names, kHookCount))
    GS_LOG(Warn, "profiling to '%s' could not start; continuing without it", dir.c_str());
}

Phase initialise() {
  auto* rt = new (std::nothrow) Runtime();
  if (rt == nullptr) return Phase::Broken;
  rt->settings = config::load_settings_from_environment();
  config::apply_limits_file(rt->settings, rt->settings.limits_file);
  log::set_level(rt->settings.log_level);
  g_rt = rt;
  if (!rt->settings.ok()) {
    for (const auto& e : rt->settings.errors)
      GS_LOG(Error, "invalid configuration: %s; CUDA calls will fail until it is fixed", e.c_str());
    return Phase::Broken;
  }
  if (!rt->settings.profile_dir.empty()) start_profiler(rt->settings.profile_dir);
  bool memory = !rt->settings.memory.empty();
  bool compute = !rt->settings.compute.empty();
  if (!memory && !compute) {
    GS_LOG(Debug, "no limit configured: pass-through");
    return Phase::Ready;
  }
  auto opened = shm::Ledger::open(rt->settings.shared_file, shm::Ledger::Mode::Process);
  if (!opened) {
    GS_LOG(Error, "shared state unusable: %s; CUDA calls will fail (limits must hold)",
           opened.error().c_str());
    return Phase::Broken;
  }
  rt->ledger = std::move(opened).value().release();
  const char* node_dir = std::getenv("GPUSLICE_NODE_DIR");
  rt->node_dir = node_dir != nullptr && *node_dir != '\0' ? node_dir : "/tmp/gpuslice-node";
  struct stat st {};
  if (stat(rt->settings.shared_file.c_str(), &st) == 0)
    rt->container_key =
        (static_cast<std::uint64_t>(st.st_dev) << 40) ^ static_cast<std::uint64_t>(st.st_ino) ^ 1;
  if (auto reg = rt->ledger->register_process(); !reg) {
    GS_LOG(Error, "cannot register in %s: %s; CUDA calls will fail", rt->settings.shared_file.c_str(),
           reg.error().c_str());
    return Phase::Broken;
  }
  pthread_atfork(nullptr, nullptr, on_fork_child);
  // Work still queued at exit is charged, so a short-lived process cannot escape its share.
  std::atexit([] {
    if (g_compute_active.load(std::memory_order_relaxed)) settle_limiters();
  });
  g_memory_active.store(memory, std::memory_order_release);
  g_compute_active.store(compute, std::memory_order_release);
  start_watcher();
  GS_LOG(Info, "limits active (state %s)", rt->settings.shared_file.c_str());
  return Phase::Ready;
}

// The child of a fork must not charge its parent's slot, and owns none of its allocations.
void rebuild_after_fork() {
  g_forked_child.store(false, std::memory_order_relaxed);
  if (g_rt == nullptr || g_rt->ledger == nullptr) return;
  clear_allocation_tables_after_fork();
  if (auto reg = g_rt->ledger->register_process(); !reg) {
    GS_LOG(Error, "forked child cannot register: %s; CUDA calls will fail", reg.error().c_str());
    g_phase.store(static_cast<int>(Phase::Broken));
    return;
  }
  for (auto& d : g_rt->devices) {
    d.context_charge.store(0);
    d.has_context.store(false);
    d.limiter.store(nullptr);  // its measuring window belonged to the parent
    d.busy_published.store(0);
  }
  g_nvml_pid.store(0, std::memory_order_relaxed);  // the child's host pid is not its parent's
  start_watcher();
}

}  // namespace

CUresult ensure_initialized() {
  int phase = g_phase.load(std::memory_order_acquire);
  if (phase == static_cast<int>(Phase::Ready)) [[likely]] {
    if (g_forked_child.load(std::memory_order_relaxed)) [[unlikely]]
      rebuild_after_fork();
    return CUDA_SUCCESS;
  }
  if (phase == static_cast<int>(Phase::Broken)) return CUDA_ERROR_NOT_INITIALIZED;
  if (t_initialising) return CUDA_SUCCESS;  // a driver call made by our own initialisation
  int expected = static_cast<int>(Phase::Uninitialised);
  if (g_phase.compare_exchange_strong(expected, static_cast<int>(Phase::Initialising))) {
    t_initialising = true;
    Phase result = initialise();
    t_initialising = false;
    g_phase.store(static_cast<int>(result), std::memory_order_release);
    return result == Phase::Ready ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
  }
  while (g_phase.load(std::memory_order_acquire) == static_cast<int>(Phase::Initialising)) sched_yield();
  return g_phase.load(std::memory_order_acquire) == static_cast<int>(Phase::Ready)
             ? CUDA_SUCCESS
             : CUDA_ERROR_NOT_INITIALIZED;
}

const config::Settings& settings() { return g_rt->settings; }
shm::Ledger* ledger() { return g_rt == nullptr ? nullptr : g_rt->ledger; }

int ledger_device_for_uuid(const char* uuid, int cuda_index, std::uint64_t physical_total) {
  Runtime* rt = g_rt;
  if (rt == nullptr || rt->ledger == nullptr) return -1;
  auto mem = rt->settings.memory.lookup(cuda_index, uuid);
  auto pct = rt->settings.compute.lookup(cuda_index, uuid);
  if (!mem && !pct) return -1;
  auto attached = rt->ledger->attach_device(uuid, cuda_index, physical_total, mem ? *mem : shm::kUnlimited,
                                            pct ? static_cast<unsigned>(*pct) : shm::kNoComputeLimit);
  if (!attached) {
    GS_LOG(Error, "cannot attach device %s to %s: %s", uuid, rt->settings.shared_file.c_str(),
           attached.error().c_str());
    return -2;
  }
  int dev = attached.value();
  // A limit that is stricter than the container's record (a limits file, a smaller quota in this
  // process's environment) tightens the record; a looser one does not loosen it.
  if (mem && *mem < rt->ledger->quota(dev)) rt->ledger->set_quota(dev, *mem);
  return dev;
}

DeviceState* device_state(CUdevice dev) {
  if (dev < 0 || dev >= kMaxDevices || g_rt == nullptr) return nullptr;
  Runtime& rt = *g_rt;
  auto& phase = rt.device_phase[dev];
  int p = phase.load(std::memory_order_acquire);
  if (p == 2) [[likely]]
    return &rt.devices[dev];
  if (p == 3) return nullptr;
  int expected = 0;
  if (!phase.compare_exchange_strong(expected, 1)) {
    while ((p = phase.load(std::memory_order_acquire)) == 1) sched_yield();
    return p == 2 ? &rt.devices[dev] : nullptr;
  }
  DeviceState& d = rt.devices[dev];
  CUuuid uuid{};
  auto get_uuid = REAL_UNHOOKED(Cuda, cuDeviceGetUuid);
  auto total_mem = REAL(cuDeviceTotalMem_v2);
  size_t total = 0;
  if (get_uuid == nullptr || total_mem == nullptr || get_uuid(&uuid, dev) != CUDA_SUCCESS ||
      total_mem(&total, dev) != CUDA_SUCCESS) {
    phase.store(3, std::memory_order_release);
    return nullptr;
  }
  d.index = dev;
  format_uuid(uuid, d.uuid, sizeof d.uuid);
  d.physical_total = total;
  int ledger_dev = ledger_device_for_uuid(d.uuid, dev, total);
  if (ledger_dev == -2) {
    phase.store(3, std::memory_order_release);
    return nullptr;
  }
  d.ledger_dev = ledger_dev;
  if (ledger_dev >= 0) {
    GS_LOG(Info, "device %d (%s): quota %" PRIu64 " bytes, compute %u%%", dev, d.uuid,
           rt.ledger->quota(ledger_dev), rt.ledger->compute_limit(ledger_dev));
  }
  phase.store(2, std::memory_order_release);
  return &d;
}

DeviceState* device_state_if_attached(CUdevice dev) {
  if (dev < 0 || dev >= kMaxDevices || g_rt == nullptr) return nullptr;
  return g_rt->device_phase[dev].load(std::memory_order_acquire) == 2 ? &g_rt->devices[dev] : nullptr;
}

DeviceState* current_device_state(CUdevice* out_dev) {
  static auto get_device = REAL_UNHOOKED(Cuda, cuCtxGetDevice);
  CUdevice dev = 0;
  if (get_device == nullptr || get_device(&dev) != CUDA_SUCCESS) return nullptr;
  if (out_dev != nullptr) *out_dev = dev;
  return device_state(dev);
}

std::uint64_t effective_quota(const DeviceState& d) {
  std::uint64_t q = g_rt->ledger->quota(d.ledger_dev);
  std::uint64_t cap = d.file_cap.load(std::memory_order_relaxed);
  return q < cap ? q : cap;
}

namespace {

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

// The driver's list of processes with a context on the device (real NVML, not our virtual view).
bool list_device_processes(const DeviceState& d, NvmlProcessList& out) {
  static auto nvml_init = REAL(nvmlInit_v2);
  static auto by_uuid = REAL_UNHOOKED(Nvml, nvmlDeviceGetHandleByUUID);
  static auto processes = REAL_UNHOOKED(Nvml, nvmlDeviceGetComputeRunningProcesses_v3);
  static bool nvml_ok =
      nvml_init != nullptr && by_uuid != nullptr && processes != nullptr && nvml_init() == NVML_SUCCESS;
  if (!nvml_ok) return false;
  nvmlDevice_t handle = nullptr;
  if (by_uuid(d.uuid, &handle) != NVML_SUCCESS) return false;
  out.count = NvmlProcessList::kCapacity;
  if (processes(handle, &out.count, out.infos) != NVML_SUCCESS) return false;
  if (out.count > NvmlProcessList::kCapacity) out.count = NvmlProcessList::kCapacity;
  return true;
}

unsigned nvml_pid_or_own() {
  unsigned pid = g_nvml_pid.load(std::memory_order_relaxed);
  return pid != 0 ? pid : static_cast<unsigned>(getpid());
}

}  // namespace

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
    if (g_rt->ledger != nullptr) g_rt->ledger->set_host_pid(static_cast<int>(found));
  }
}

void reconcile_context_footprint(DeviceState& d) {
  // NVML's per-process figure covers everything the driver holds for us: the context, module
  // images, pool caches and allocation rounding. Whatever exceeds our tracked allocations is charged.
  shm::Ledger* l = g_rt->ledger;
  NvmlProcessList list;
  // The driver's figure and our books must describe the same moment: skip the round if any
  // allocation or free was in progress or completed while NVML was asked.
  std::uint64_t done_before = g_allocs_done.load(std::memory_order_acquire);
  if (g_allocs_in_flight.load(std::memory_order_acquire) != 0) return;
  std::uint64_t self_before = l->used_by_self(d.ledger_dev);
  if (!list_device_processes(d, list)) return;
  std::uint64_t self_after = l->used_by_self(d.ledger_dev);
  if (self_before != self_after || g_allocs_in_flight.load(std::memory_order_acquire) != 0 ||
      g_allocs_done.load(std::memory_order_acquire) != done_before)
    return;
  unsigned pid = nvml_pid_or_own();
  for (unsigned i = 0; i < list.count; ++i) {
    if (list.infos[i].pid != pid) continue;
    std::uint64_t charge = d.context_charge.load(std::memory_order_relaxed);
    std::uint64_t tracked = self_after - charge;
    std::uint64_t reported = list.infos[i].usedGpuMemory;
    std::uint64_t target = reported > tracked ? reported - tracked : 0;
    constexpr std::uint64_t kSlack = 2ULL << 20;  // below allocation granularity: not worth a change
    if (target > charge + kSlack) {
      if (l->try_reserve(d.ledger_dev, target - charge)) d.context_charge.store(target);
    } else if (target + kSlack < charge) {
      l->release(d.ledger_dev, charge - target);
      d.context_charge.store(target);
    }
    return;
  }
}

}  // namespace gpuslice::interposer
