#include "interposer/lifecycle.h"

#include <pthread.h>
#include <sched.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <new>
#include <string>

#include "common/log.h"
#include "common/safe_file.h"
#include "config/limits_file.h"
#include "interposer/background_thread.h"
#include "interposer/compute_limit.h"
#include "interposer/context_books.h"
#include "interposer/core_driver.h"
#include "interposer/devices.h"
#include "interposer/driver_reservations.h"
#include "interposer/hooks.h"
#include "interposer/launch_flag.h"
#include "interposer/library_globals.h"
#include "interposer/memory_books.h"
#include "interposer/mps_client.h"
#include "interposer/node_presence.h"
#include "interposer/priority_sharing.h"
#include "interposer/reclaim/reclaim_engine.h"
#include "interposer/runtime.h"

namespace gpuslice::interposer {
namespace {

enum class Phase : int { Uninitialised, Initialising, Ready, Broken };

std::atomic<Phase> g_phase{Phase::Uninitialised};
std::atomic<bool> g_forked_child{false};
std::atomic<bool> g_watcher_running{false};
thread_local bool t_initialising = false;

void sleep_ms(int ms) {
  timespec ts{0, static_cast<long>(ms) * 1000000L};
  nanosleep(&ts, nullptr);
}

// Opens the container ledger and registers this process in it; false (said why) if limits cannot hold.
bool bring_up_ledger(Runtime& rt) {
  auto opened = shm::Ledger::open(rt.settings.shared_file, shm::Ledger::Mode::Process);
  if (!opened) {
    GS_LOG(Error, "shared state unusable: %s; CUDA calls will fail (limits must hold)",
           opened.error().c_str());
    return false;
  }
  shm::Ledger* books = std::move(opened).value().release();
  struct stat st {};
  if (stat(rt.settings.shared_file.c_str(), &st) == 0)
    rt.container_key =
        (static_cast<std::uint64_t>(st.st_dev) << 40) ^ static_cast<std::uint64_t>(st.st_ino) ^ 1;
  if (auto reg = books->register_process(); !reg) {
    GS_LOG(Error, "cannot register in %s: %s; CUDA calls will fail", rt.settings.shared_file.c_str(),
           reg.error().c_str());
    delete books;
    return false;
  }
  rt.ledger.store(books, std::memory_order_release);
  // Work still queued at exit is charged, so a short-lived process cannot escape its share.
  std::atexit([] {
    compute_limit::settle_at_exit();
    priority_sharing::settle_at_exit();
    reclaim::at_exit();
  });
  return true;
}

void* watcher_main(void*) {
  for (unsigned tick = 1;; ++tick) {
    sleep_ms(100);
    if (g_forked_child.load(std::memory_order_relaxed)) continue;
    Runtime& rt = *runtime();
    // A process that started without any limit waits for the limits file's first cap.
    if (refresh_limits_file()) {
      rt.capped_late.store(true, std::memory_order_relaxed);
      if (!bring_up_ledger(rt)) {
        g_phase.store(Phase::Broken, std::memory_order_release);
        g_watcher_running.store(false, std::memory_order_relaxed);
        return nullptr;
      }
      GS_LOG(Info, "limits active from %s (state %s)", rt.settings.limits_file.c_str(),
             rt.settings.shared_file.c_str());
      refresh_limits_file();
    }
    if (rt.ledger.load(std::memory_order_acquire) == nullptr) continue;
    node_presence::refresh_assignments();  // the one read of the assignment per tick, for both
    compute_limit::tick();
    priority_sharing::tick();
    driver_reservations::tick();
    memory_books::tick(tick);
    reclaim::tick();
  }
  return nullptr;
}

// Whether the limits file can still appear: its directory exists (a mount the node daemon fills).
bool limits_file_may_appear(const std::string& file) {
  std::string dir, name;
  if (!fs::split_path(file, &dir, &name)) return false;
  struct stat st {};
  return stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The limits file is missing while the container's state records caps read from it: it is being
// rewritten (deleted, then created) or was removed. Starting without them would lift them, for
// this process and, at its first attach, for the container. Lifting takes a file saying `none`.
bool caps_recorded_without_their_file(const config::Settings& s) {
  if (!s.limits_file_missing || !limits_file_may_appear(s.limits_file)) return false;
  struct stat st {};
  if (stat(s.shared_file.c_str(), &st) != 0) return false;  // the container's first process
  auto opened = shm::Ledger::open(s.shared_file, shm::Ledger::Mode::Observer);
  if (!opened) return false;  // the ledger's own bring-up reports what is wrong with it
  for (const shm::DeviceRow& row : opened.value()->snapshot().devices) {
    if (row.cap.quota != shm::kUnlimited || row.cap.compute != shm::kNoComputeLimit) return true;
  }
  return false;
}

void start_watcher() {
  bool expected = false;
  if (!g_watcher_running.compare_exchange_strong(expected, true)) return;
  if (!start_background_thread(watcher_main)) {
    g_watcher_running.store(false);
    GS_LOG(Warn, "cannot start the watcher thread: dead processes are reaped only on refusals");
  }
}

void on_fork_child() {
  // Only async-signal-safe work here; the rest happens on the child's next hooked call.
  g_forked_child.store(true, std::memory_order_relaxed);
  g_watcher_running.store(false, std::memory_order_relaxed);
  // The parent's watcher may have held it at the moment of the fork; it does not exist here.
  if (Runtime* rt = runtime()) rt->limits_lock.store(false, std::memory_order_relaxed);
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
  set_core_driver(real_core_driver());
  memory_books::set_reclaim(trim_graph_pool);
  rt->settings = config::load_settings_from_environment();
  config::apply_limits_file(rt->settings, rt->settings.limits_file);
  if (rt->settings.limits_file_required) {
    // The node daemon wrote it: gone means something removed the container's directory, not "no cap".
    struct stat st {};
    if (stat(rt->settings.limits_file.c_str(), &st) != 0 && errno == ENOENT) {
      rt->settings.errors.push_back(
          "GPUSLICE_LIMITS_FILE='" + rt->settings.limits_file +
          "': missing, though GPUSLICE_LIMITS_REQUIRED=1 says the node daemon wrote it");
    }
  }
  log::set_level(rt->settings.log_level);
  install_runtime(rt);
  if (!rt->settings.ok()) {
    for (const auto& e : rt->settings.errors)
      GS_LOG(Error, "invalid configuration: %s; CUDA calls will fail until it is fixed", e.c_str());
    return Phase::Broken;
  }
  if (caps_recorded_without_their_file(rt->settings)) {
    GS_LOG(Error,
           "limits file %s is missing, but the container's state (%s) records caps from it; CUDA calls "
           "fail (write %s=%s to lift the caps)",
           rt->settings.limits_file.c_str(), rt->settings.shared_file.c_str(), config::kMemoryLimitKey,
           config::kNoCap);
    return Phase::Broken;
  }
  if (!rt->settings.profile_dir.empty()) start_profiler(rt->settings.profile_dir);
  const bool priority = rt->settings.priority.has_value();
  pthread_atfork(nullptr, nullptr, on_fork_child);
  if (!rt->settings.has_limits() && !priority) {
    // Pass-through; the watcher only looks for a cap written later where the file can appear.
    if (limits_file_may_appear(rt->settings.limits_file)) start_watcher();
    GS_LOG(Debug, "no limit configured: pass-through");
    return Phase::Ready;
  }
  if (!bring_up_ledger(*rt)) return Phase::Broken;
  shm::Ledger* const books = rt->ledger.load(std::memory_order_relaxed);
  // Before any real driver call (the driver reads the MPS variables when it starts), after the
  // ledger (a compute limit set live before this process started decides its SM share).
  if (!mps_client::prepare(rt->settings, books)) return Phase::Broken;
  // GPUSLICE_PRIORITY is the container's initial level; a level set live since (gpuslice set
  // --priority) wins.
  if (priority) books->init_priority(*rt->settings.priority);
  priority_sharing::refresh();
  const config::Settings& s = rt->settings;
  g_memory_active.store(!s.memory.empty() || !s.memory_cap.empty(), std::memory_order_release);
  if (!s.compute.empty() || !s.compute_cap.empty()) launch_flag::turn_on();
  start_watcher();
  GS_LOG(Info, "limits active (state %s)", rt->settings.shared_file.c_str());
  return Phase::Ready;
}

// The child of a fork must not charge its parent's slot, and owns none of its allocations.
void rebuild_after_fork() {
  g_forked_child.store(false, std::memory_order_relaxed);
  Runtime* rt = runtime();
  if (rt == nullptr) return;
  shm::Ledger* const books = rt->ledger.load(std::memory_order_acquire);
  if (books == nullptr) {
    // A pass-through parent may have been watching for a first cap: so does the child.
    if (!rt->settings.has_limits() && limits_file_may_appear(rt->settings.limits_file)) start_watcher();
    return;
  }
  memory_books::after_fork();
  reclaim::after_fork();
  context_books::after_fork();
  libraries_after_fork();
  compute_limit::after_fork();
  priority_sharing::after_fork();
  if (auto reg = books->register_process(); !reg) {
    GS_LOG(Error, "forked child cannot register: %s; CUDA calls will fail", reg.error().c_str());
    g_phase.store(Phase::Broken);
    return;
  }
  start_watcher();
}

}  // namespace

void fail_closed() { g_phase.store(Phase::Broken, std::memory_order_release); }

CUresult ensure_initialized() {
  Phase phase = g_phase.load(std::memory_order_acquire);
  if (phase == Phase::Ready) [[likely]] {
    if (g_forked_child.load(std::memory_order_relaxed)) [[unlikely]] {
      rebuild_after_fork();
      return g_phase.load(std::memory_order_acquire) == Phase::Ready ? CUDA_SUCCESS
                                                                     : CUDA_ERROR_NOT_INITIALIZED;
    }
    return CUDA_SUCCESS;
  }
  if (phase == Phase::Broken) return CUDA_ERROR_NOT_INITIALIZED;
  if (t_initialising) return CUDA_SUCCESS;  // a driver call made by our own initialisation
  Phase expected = Phase::Uninitialised;
  if (g_phase.compare_exchange_strong(expected, Phase::Initialising)) {
    t_initialising = true;
    Phase result = initialise();
    t_initialising = false;
    g_phase.store(result, std::memory_order_release);
    return result == Phase::Ready ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
  }
  while (g_phase.load(std::memory_order_acquire) == Phase::Initialising) sched_yield();
  return g_phase.load(std::memory_order_acquire) == Phase::Ready ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

}  // namespace gpuslice::interposer
