// State shared by the profiler's parts: limits, the per-thread rings, the session a flush works on
// and the locks. Everything a flush touches is allocated by start(), so flushing never allocates
// (the SIGTERM handler flushes, and malloc is not async-signal-safe).
#pragma once

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <climits>
#include <cstddef>
#include <cstdint>

#include "profiler/profiler.h"

namespace gpuslice::profiler::detail {

constexpr std::uint64_t kFlushIntervalNs = 1'000'000'000;
constexpr std::uint64_t kDrainCheckNs = 100'000'000;
constexpr unsigned kDurationBits = 48;
constexpr std::uint64_t kMaxDuration = (std::uint64_t{1} << kDurationBits) - 1;
constexpr std::size_t kMaxApis = 65536;  // api ids are 16 bits
constexpr std::size_t kMaxNameBytes = 128;
constexpr std::size_t kMaxExtraNames = 256;  // names other processes report that we do not know
constexpr std::size_t kTimelineBufferBytes = std::size_t{64} * 1024;
constexpr std::size_t kReadBufferBytes = std::size_t{16} * 1024;
constexpr std::size_t kDirentBufferBytes = std::size_t{8} * 1024;
constexpr std::size_t kLineSlack = kMaxNameBytes + 128;  // longest line we format, with numbers
constexpr std::size_t kMaxTopUsersBytes = 512;
constexpr int kTerminationSignals[] = {SIGTERM, SIGINT};

struct Event {
  std::uint64_t start_epoch_ns;
  std::uint64_t id_and_duration;  // api id in the top 16 bits
};

struct ApiTotals {
  std::atomic<std::uint64_t> count{0};
  std::atomic<std::uint64_t> total_ns{0};
};

// Single-producer (the owning thread) single-consumer (whoever holds g_flush_mutex) ring. The
// aggregates are written only by the owner, with relaxed stores, so readers never see torn values.
struct alignas(64) Ring {
  std::uint32_t session = 0;
  std::uint32_t api_count = 0;
  std::uint64_t mask = 0;
  Event* events = nullptr;
  ApiTotals* totals = nullptr;
  Ring* next = nullptr;   // registry list; linked under g_registry_mutex
  std::uint32_t tid = 0;  // the owning thread (gettid), written into its timeline lines

  alignas(64) std::atomic<std::uint64_t> head{0};
  std::uint64_t cached_tail = 0;
  std::atomic<std::uint64_t> dropped{0};

  alignas(64) std::atomic<std::uint64_t> tail{0};
  std::atomic<bool> retired{false};
};

// Everything a flush needs, allocated by start() so that flushing never allocates: the SIGTERM
// handler flushes, and malloc is not async-signal-safe.
struct Session {
  std::uint32_t id = 0;
  Options options;
  char dir[PATH_MAX] = {};
  std::size_t api_count = 0;
  std::uint64_t ring_capacity = 0;
  char* name_storage = nullptr;  // api_count * kMaxNameBytes
  std::size_t* name_length = nullptr;
  // Ids that share a name report as one API: the first id with that name.
  std::uint32_t* canonical = nullptr;
  int dir_fd = -1;  // the profile directory, checked once at start (see profile_dir.h)
  int timeline_fd = -1;

  // Folded totals of threads that exited and whose rings were freed.
  std::uint64_t* retired_count = nullptr;
  std::uint64_t* retired_total = nullptr;
  std::uint64_t retired_dropped = 0;

  std::uint64_t* snapshot_count = nullptr;
  std::uint64_t* snapshot_total = nullptr;
  std::uint64_t last_written_count_sum = 0;
  std::uint64_t last_written_total_sum = 0;
  std::uint64_t last_reported_dropped = 0;
  bool own_file_claimed = false;
  char own_file_name[64] = {};

  char* timeline_buffer = nullptr;
  std::size_t timeline_used = 0;
  bool timeline_error_logged = false;
  char* text_buffer = nullptr;
  std::size_t text_capacity = 0;
  char* read_buffer = nullptr;
  char* dirent_buffer = nullptr;

  // Merge of every process's metrics.<pid>.log into metrics.log.
  std::uint64_t* merged_count = nullptr;  // api_count + kMaxExtraNames
  std::uint64_t* merged_total = nullptr;
  char* extra_names = nullptr;  // kMaxExtraNames * kMaxNameBytes
  std::size_t extra_count = 0;

  pthread_t flusher{};
  bool flusher_running = false;

  const char* name(std::size_t index) const {
    return index < api_count ? name_storage + index * kMaxNameBytes
                             : extra_names + (index - api_count) * kMaxNameBytes;
  }
};

// Static storage with trivial destructors: the flusher may still run while the process exits.
extern pthread_mutex_t g_control_mutex;   // start/stop
extern pthread_mutex_t g_flush_mutex;     // Session and ring consumers
extern pthread_mutex_t g_registry_mutex;  // the ring list (event_rings.cpp)
extern pthread_mutex_t g_wake_mutex;      // the flusher's sleep and stop (background_flusher.cpp)
extern Session g_session;
extern std::atomic<bool> g_running;
// The running session's id; a ring of another id belongs to an earlier session (or the parent).
extern std::atomic<std::uint32_t> g_session_id;

// Our own locks, counted per thread: a signal handler on this thread must not take them again.
extern thread_local int t_lock_depth;
void lock(pthread_mutex_t* mutex);
void unlock(pthread_mutex_t* mutex);

class Guard {
 public:
  explicit Guard(pthread_mutex_t* mutex) : mutex_(mutex) { lock(mutex_); }
  ~Guard() { unlock(mutex_); }
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

 private:
  pthread_mutex_t* mutex_;
};

// Clears refusal_report.cpp's spin lock in a fork child (its holder thread did not survive).
void reset_refusal_lock_after_fork();

}  // namespace gpuslice::profiler::detail
