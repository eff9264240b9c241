#include "interposer/mps_client.h"

#include <pthread.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

#include "common/log.h"
#include "common/safe_file.h"
#include "config/mps_client.h"
#include "config/text_util.h"
#include "interposer/background_thread.h"
#include "shared_state/ledger.h"
#include "shared_state/node_channel.h"

namespace gpuslice::interposer::mps_client {
namespace {

// Set on a pipe directory that cannot exist (/dev/null is no directory), the driver finds no
// control daemon and runs the client without MPS (GPUSLICE_MPS=fallback).
constexpr const char* kNoPipeDir = "/dev/null/gpuslice-no-mps";
constexpr const char* kGpusDir = "/proc/driver/nvidia/gpus";
constexpr long kWarnEverySeconds = 10;

std::atomic<bool> g_mps{false};       // this process's driver will connect to an MPS control daemon
std::atomic<unsigned> g_sm_share{0};  // GPUSLICE_MPS_COMPUTE=threads in force: the SM share
std::string g_pipe_dir;               // written once in prepare(), before any reader

bool is_socket(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

// The driver connects to <pipe dir>/control: the variable's directory, or NVIDIA's default.
bool will_use_mps(const config::Settings& s, std::string* pipe_dir) {
  if (s.mps_pipe_dir && !s.mps_pipe_dir->empty()) {
    *pipe_dir = *s.mps_pipe_dir;
    return true;
  }
  *pipe_dir = config::kMpsDefaultPipeDir;
  return is_socket(*pipe_dir + "/control");
}

// The quota per client ordinal: the lower of the request and the operator's cap, as the books
// apply them (shm::effective_quota), keyed by UUID where the ordinal's UUID is known.
std::vector<std::pair<int, std::uint64_t>> quotas(const config::Settings& s) {
  std::optional<std::string> visible;
  if (s.visible_devices_set) visible = s.visible_devices;
  std::vector<std::string> ordinals =
      config::client_ordinal_uuids(visible, config::machine_gpu_uuids(kGpusDir));
  // Without the kernel module's list (no NVIDIA driver here, or hidden) the ordinals the limits
  // name by index are still known.
  if (ordinals.empty()) {
    int count = 1;
    for (const config::DeviceValues* v : {&s.memory, &s.memory_cap})
      for (const auto& [index, bytes] : v->by_index) count = std::max(count, index + 1);
    ordinals.resize(static_cast<std::size_t>(std::min(count, config::kMaxCudaDevices)));
  }
  std::vector<std::pair<int, std::uint64_t>> out;
  for (std::size_t i = 0; i < ordinals.size(); ++i) {
    const int index = static_cast<int>(i);
    const auto request = s.memory.lookup(index, ordinals[i]);
    const auto cap = s.memory_cap.lookup(index, ordinals[i]);
    if (request && cap) {
      out.emplace_back(index, std::min(*request, *cap));
    } else if (request || cap) {
      out.emplace_back(index, request ? *request : *cap);
    }
  }
  return out;
}

bool only_for_all(const config::DeviceValues& v) {
  return v.by_index.empty() && v.by_uuid.empty() && v.fallbacks.empty();
}

// The compute limit (percent, 0: none) of every device the client can use, in its ordinals: the
// lower of the request (the container's live one where its record exists: a `gpuslice set` made
// before this process started applies) and the operator's cap as this process read it. Nullopt when the
// devices are not known: no kernel module list (or a UUID it lacks) while a limit names devices one by one.
std::optional<std::vector<unsigned>> compute_limits(const config::Settings& s, const shm::Ledger* books) {
  std::optional<std::string> visible;
  if (s.visible_devices_set) visible = s.visible_devices;
  const std::vector<std::string> ordinals =
      config::client_ordinal_uuids(visible, config::machine_gpu_uuids(kGpusDir));
  const bool same_for_all = only_for_all(s.compute) && only_for_all(s.compute_cap);
  const bool by_uuid = !s.compute.by_uuid.empty() || !s.compute_cap.by_uuid.empty() ||
                       !s.compute.fallbacks.empty() || !s.compute_cap.fallbacks.empty();
  const auto cap_of = [&s](int index, const std::string& uuid) {
    const auto cap = s.compute_cap.lookup(index, uuid);
    return cap ? static_cast<unsigned>(*cap) : shm::kNoComputeLimit;
  };
  const auto configured = [&s, &cap_of](int index, const std::string& uuid) {
    const auto request = s.compute.lookup(index, uuid);
    return shm::effective_compute(request ? static_cast<unsigned>(*request) : shm::kNoComputeLimit,
                                  cap_of(index, uuid));
  };
  if (ordinals.empty()) {
    if (!same_for_all) return std::nullopt;
    return std::vector<unsigned>{configured(0, "")};
  }
  std::vector<unsigned> out;
  for (std::size_t i = 0; i < ordinals.size(); ++i) {
    const std::string& uuid = ordinals[i];
    if (uuid.empty() && by_uuid) return std::nullopt;  // a limit by UUID may name it
    const int index = static_cast<int>(i);
    const int record = books != nullptr && !uuid.empty() ? books->find_device(uuid) : -1;
    // The container's request as it stands (a live change included) under the file just read.
    out.push_back(record >= 0 ? shm::effective_compute(books->requested(record).compute, cap_of(index, uuid))
                              : configured(index, uuid));
  }
  return out;
}

// High only where the operator assigned it (node directory) and the container asks for high or for
// no level (the assigned level is its default as well as its ceiling).
bool runs_high(const config::Settings& s) {
  if (s.priority && *s.priority != Priority::High) return false;
  const int node_fd = fs::open_dir_raw(s.node_dir.c_str(), fs::DirTrust::SharedSticky);
  if (node_fd < 0) return false;
  fs::UniqueFd guard(node_fd);
  const std::string writer = s.node_writer.empty() ? "uid-" + std::to_string(::geteuid()) : s.node_writer;
  shm::Assignment assigned;
  return shm::NodeChannel::read_assignment(node_fd, writer.c_str(), "", &assigned) &&
         assigned.priority == Priority::High;
}

// Once per process, in its first hooked call, before any CUDA work; the driver reads the variables
// when it starts. Other application threads may be running then: glibc's setenv is as safe beside
// them as any library's that sets a variable at start (a concurrent getenv of another name is the
// known hazard, and the window is this one call).
void set(const char* name, const std::string& value) {
  if (::setenv(name, value.c_str(), 1) != 0) GS_LOG(Warn, "MPS: cannot set %s", name);
}

pthread_mutex_t g_watch_mutex = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_watch_cond = PTHREAD_COND_INITIALIZER;
bool g_init_done = false;
std::atomic<bool> g_watching{false};

void* watch_main(void*) {
  timespec start{};
  clock_gettime(CLOCK_REALTIME, &start);
  pthread_mutex_lock(&g_watch_mutex);
  for (long waited = kWarnEverySeconds; !g_init_done; waited += kWarnEverySeconds) {
    timespec until = start;
    until.tv_sec += waited;
    while (!g_init_done && pthread_cond_timedwait(&g_watch_cond, &g_watch_mutex, &until) == 0) {
    }
    if (g_init_done) break;
    GS_LOG(Warn,
           "cuInit has waited %ld s for the MPS server (pipe directory %s): MPS serves one user id at a "
           "time per GPU and a client of another user waits until that server's clients have all ended; "
           "GPUSLICE_MPS=fallback runs without MPS instead",
           waited, config::detail::printable(g_pipe_dir).c_str());
  }
  pthread_mutex_unlock(&g_watch_mutex);
  return nullptr;
}

}  // namespace

bool prepare(const config::Settings& s, const shm::Ledger* books) {
  g_sm_share.store(0, std::memory_order_relaxed);  // once per process; a test may prepare again
  g_mps.store(false, std::memory_order_release);
  std::string pipe_dir;
  if (!will_use_mps(s, &pipe_dir)) return true;
  g_pipe_dir = pipe_dir;
  const std::string shown = config::detail::printable(pipe_dir);
  if (const auto other = config::other_uid_mps_server("/proc", pipe_dir, ::geteuid())) {
    switch (s.mps_policy) {
      case config::MpsPolicy::Error:
        GS_LOG(Error,
               "the MPS server of pipe directory %s serves user id %u, and MPS serves one user id at a time: "
               "this process (user id %u) would wait until its clients end; CUDA calls fail "
               "(GPUSLICE_MPS=error; =fallback runs without MPS, =wait waits)",
               shown.c_str(), static_cast<unsigned>(*other), static_cast<unsigned>(::geteuid()));
        return false;
      case config::MpsPolicy::Fallback:
        GS_LOG(Warn,
               "the MPS server of pipe directory %s serves user id %u: running without MPS, time-sliced "
               "(GPUSLICE_MPS=fallback)",
               shown.c_str(), static_cast<unsigned>(*other));
        set(config::kMpsPipeDirVar, kNoPipeDir);
        return true;
      case config::MpsPolicy::Wait:
        GS_LOG(
            Warn,
            "the MPS server of pipe directory %s serves user id %u: this process (user id %u) waits in "
            "cuInit until its clients have all ended (GPUSLICE_MPS=fallback runs without MPS, =error fails)",
            shown.c_str(), static_cast<unsigned>(*other), static_cast<unsigned>(::geteuid()));
        break;
    }
  }
  config::MpsClientInputs in;
  in.quota_by_ordinal = quotas(s);
  in.high = runs_high(s);
  in.low_threads = s.mps_low_threads;
  in.tenant_pinned = s.mps_pinned;
  in.tenant_priority = s.mps_priority;
  in.tenant_threads = s.mps_threads;
  in.compute_mode = s.mps_compute;
  in.compute_by_ordinal = compute_limits(s, books);
  const config::MpsClientEnv env = config::derive_mps_client_env(in);
  if (env.pinned) set(config::kMpsPinnedLimitVar, *env.pinned);
  set(config::kMpsClientPriorityVar, env.priority);
  if (env.threads) set(config::kMpsThreadPercentVar, *env.threads);
  g_sm_share.store(env.sm_share, std::memory_order_release);
  g_mps.store(true, std::memory_order_release);
  GS_LOG(Info, "MPS client (pipe directory %s): %s=%s %s=%s %s=%s%s%s%s", shown.c_str(),
         config::kMpsPinnedLimitVar, env.pinned ? env.pinned->c_str() : "(none)",
         config::kMpsClientPriorityVar, env.priority.c_str(), config::kMpsThreadPercentVar,
         env.threads ? env.threads->c_str() : "(unset)",
         env.tenant_lowered ? "; the container's own values were lowered" : "",
         env.compute_note.empty() ? "" : "; ", env.compute_note.c_str());
  return true;
}

bool active() { return g_mps.load(std::memory_order_acquire); }

unsigned sm_share() { return g_sm_share.load(std::memory_order_relaxed); }

void init_begin() {
  if (!g_mps.load(std::memory_order_acquire) || g_watching.exchange(true)) return;
  if (!start_background_thread(watch_main))
    GS_LOG(Debug, "MPS: no watch thread; a wait for another user's server is not reported");
}

void init_end() {
  if (!g_watching.load(std::memory_order_acquire)) return;
  pthread_mutex_lock(&g_watch_mutex);
  g_init_done = true;
  pthread_cond_broadcast(&g_watch_cond);
  pthread_mutex_unlock(&g_watch_mutex);
}

}  // namespace gpuslice::interposer::mps_client
