#include "profiler/profiler.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "common/clock.h"
#include "common/log.h"
#include "profiler/refusal_limiter.h"

namespace gpuslice::profiler {

std::atomic<bool> g_enabled{false};

namespace {

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
constexpr std::size_t kLineSlack = kMaxNameBytes + 64;  // longest line we format, with numbers
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
  Ring* next = nullptr;  // registry list; linked under g_registry_mutex

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

// All of this has static storage with trivial destructors: the flusher may still run while the
// process exits, and nothing may be destroyed under it.
pthread_mutex_t g_control_mutex = PTHREAD_MUTEX_INITIALIZER;   // start/stop
pthread_mutex_t g_flush_mutex = PTHREAD_MUTEX_INITIALIZER;     // Session and ring consumers
pthread_mutex_t g_registry_mutex = PTHREAD_MUTEX_INITIALIZER;  // the ring list
pthread_mutex_t g_wake_mutex = PTHREAD_MUTEX_INITIALIZER;      // flusher sleep/stop
pthread_cond_t g_wake_cond;
bool g_flusher_stop_requested = false;

Session g_session;
Ring* g_rings = nullptr;
std::atomic<std::uint32_t> g_session_id{0};
std::atomic<bool> g_running{false};
bool g_process_hooks_installed = false;
pthread_key_t g_thread_key;
bool g_signal_installed[sizeof kTerminationSignals / sizeof kTerminationSignals[0]] = {};

std::atomic_flag g_refusal_lock = ATOMIC_FLAG_INIT;
RefusalLimiter g_refusals;

thread_local Ring* t_ring = nullptr;
// Locks of ours this thread holds: a signal handler on this thread must not take them again.
thread_local int t_lock_depth = 0;

void lock(pthread_mutex_t* mutex) {
  pthread_mutex_lock(mutex);
  ++t_lock_depth;
}
void unlock(pthread_mutex_t* mutex) {
  --t_lock_depth;
  pthread_mutex_unlock(mutex);
}

class Guard {
 public:
  explicit Guard(pthread_mutex_t* mutex) : mutex_(mutex) { lock(mutex_); }
  ~Guard() { unlock(mutex_); }
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

 private:
  pthread_mutex_t* mutex_;
};

// ---- small allocation-free formatting and I/O helpers ----

char* put_u64(char* out, std::uint64_t value) {
  char digits[20];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value != 0);
  while (n > 0) *out++ = digits[--n];
  return out;
}

char* put_str(char* out, const char* text, std::size_t length) {
  std::memcpy(out, text, length);
  return out + length;
}

char* put_str(char* out, const char* text) { return put_str(out, text, std::strlen(text)); }

// <dir>/<name> into `out`; false if it does not fit.
bool join_path(char* out, const char* dir, const char* name) {
  std::size_t dir_length = std::strlen(dir);
  std::size_t name_length = std::strlen(name);
  if (dir_length + 1 + name_length + 1 > PATH_MAX) return false;
  char* p = put_str(out, dir, dir_length);
  *p++ = '/';
  p = put_str(p, name, name_length);
  *p = '\0';
  return true;
}

bool write_all(int fd, const char* data, std::size_t length) {
  while (length > 0) {
    ssize_t n = ::write(fd, data, length);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    length -= static_cast<std::size_t>(n);
  }
  return true;
}

bool parse_u64(const char* text, const char* end, std::uint64_t* value) {
  if (text == end) return false;
  std::uint64_t result = 0;
  for (const char* p = text; p != end; ++p) {
    if (*p < '0' || *p > '9') return false;
    std::uint64_t digit = static_cast<std::uint64_t>(*p - '0');
    if (result > (UINT64_MAX - digit) / 10) return false;
    result = result * 10 + digit;
  }
  *value = result;
  return true;
}

std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

bool make_directories(const char* dir) {
  char path[PATH_MAX];
  std::size_t length = std::strlen(dir);
  if (length == 0 || length >= sizeof path) return false;
  std::memcpy(path, dir, length + 1);
  for (std::size_t i = 1; i <= length; ++i) {
    if (path[i] != '/' && path[i] != '\0') continue;
    char saved = path[i];
    path[i] = '\0';
    if (::mkdir(path, 0755) != 0 && errno != EEXIST) return false;
    path[i] = saved;
  }
  struct stat info {};
  return ::stat(dir, &info) == 0 && S_ISDIR(info.st_mode);
}

// Writes `length` bytes to <dir>/<final_name> through a temporary file and rename, so readers see
// the old or the new content, never a partial file.
bool replace_file(const char* dir, const char* temp_name, const char* final_name, const char* data,
                  std::size_t length) {
  char temp_path[PATH_MAX];
  char final_path[PATH_MAX];
  if (!join_path(temp_path, dir, temp_name) || !join_path(final_path, dir, final_name)) return false;
  int fd = ::open(temp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  bool written = write_all(fd, data, length);
  ::close(fd);
  if (!written || ::rename(temp_path, final_path) != 0) {
    ::unlink(temp_path);
    return false;
  }
  return true;
}

void append_to_file(const char* dir, const char* name, const char* data, std::size_t length) {
  char path[PATH_MAX];
  if (!join_path(path, dir, name)) return;
  int fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    GS_LOG(Warn, "profiler: cannot open %s: %s", path, std::strerror(errno));
    return;
  }
  if (!write_all(fd, data, length)) GS_LOG(Warn, "profiler: cannot write %s: %s", path, std::strerror(errno));
  ::close(fd);
}

// ---- rings ----

Ring* allocate_ring(std::uint32_t session, std::size_t api_count, std::uint64_t capacity) {
  std::size_t header = (sizeof(Ring) + 63) / 64 * 64;
  std::size_t totals_bytes = (api_count * sizeof(ApiTotals) + 63) / 64 * 64;
  void* memory = nullptr;
  if (posix_memalign(&memory, 64, header + totals_bytes + capacity * sizeof(Event)) != 0) return nullptr;
  auto* bytes = static_cast<unsigned char*>(memory);
  Ring* ring = new (bytes) Ring();
  ring->session = session;
  ring->api_count = static_cast<std::uint32_t>(api_count);
  ring->mask = capacity - 1;
  ring->totals = reinterpret_cast<ApiTotals*>(bytes + header);
  for (std::size_t i = 0; i < api_count; ++i) new (&ring->totals[i]) ApiTotals();
  ring->events = reinterpret_cast<Event*>(bytes + header + totals_bytes);
  return ring;
}

void on_thread_exit(void* value) {
  auto* ring = static_cast<Ring*>(value);
  if (t_ring == ring) t_ring = nullptr;
  // The flusher drains and frees the ring; this thread no longer touches it.
  ring->retired.store(true, std::memory_order_release);
}

[[gnu::noinline]] Ring* register_thread() {
  if (!g_running.load(std::memory_order_acquire)) return nullptr;
  Guard guard(&g_registry_mutex);
  if (!g_running.load(std::memory_order_relaxed)) return nullptr;
  Ring* ring = allocate_ring(g_session.id, g_session.api_count, g_session.ring_capacity);
  if (ring == nullptr) return nullptr;
  ring->next = g_rings;
  g_rings = ring;
  // A ring of an earlier session (start after stop) is abandoned by this thread.
  if (t_ring != nullptr) t_ring->retired.store(true, std::memory_order_release);
  t_ring = ring;
  pthread_setspecific(g_thread_key, ring);
  return ring;
}

void unlink_ring(Ring* ring) {
  Guard guard(&g_registry_mutex);
  for (Ring** link = &g_rings; *link != nullptr; link = &(*link)->next) {
    if (*link == ring) {
      *link = ring->next;
      return;
    }
  }
}

Ring* registry_head() {
  Guard guard(&g_registry_mutex);
  return g_rings;
}

// ---- flushing (g_flush_mutex held) ----

void write_timeline_buffer(Session& s) {
  if (s.timeline_used == 0) return;
  // One write(2) of whole lines: with O_APPEND, lines of several processes never interleave.
  if (!write_all(s.timeline_fd, s.timeline_buffer, s.timeline_used) && !s.timeline_error_logged) {
    s.timeline_error_logged = true;
    GS_LOG(Warn, "profiler: cannot write timeline.log in %s: %s", s.dir, std::strerror(errno));
  }
  s.timeline_used = 0;
}

void drain(Session& s, Ring* ring) {
  std::uint64_t tail = ring->tail.load(std::memory_order_relaxed);
  const std::uint64_t head = ring->head.load(std::memory_order_acquire);
  for (; tail != head; ++tail) {
    const Event& event = ring->events[tail & ring->mask];
    const std::size_t api = static_cast<std::size_t>(event.id_and_duration >> kDurationBits);
    if (s.timeline_used + kLineSlack > kTimelineBufferBytes) write_timeline_buffer(s);
    char* p = s.timeline_buffer + s.timeline_used;
    p = put_str(p, "name:", 5);
    p = put_str(p, s.name(api), s.name_length[api]);
    p = put_str(p, " start:", 7);
    p = put_u64(p, event.start_epoch_ns);
    p = put_str(p, " burst:", 7);
    p = put_u64(p, event.id_and_duration & kMaxDuration);
    *p++ = '\n';
    s.timeline_used = static_cast<std::size_t>(p - s.timeline_buffer);
  }
  ring->tail.store(tail, std::memory_order_release);
}

// Frees rings whose thread has exited, after draining them and keeping their totals.
void reap_retired_rings(Session& s) {
  Ring* ring = registry_head();
  while (ring != nullptr) {
    Ring* next = ring->next;
    if (ring->retired.load(std::memory_order_acquire)) {
      if (ring->session == s.id) {
        drain(s, ring);
        for (std::size_t i = 0; i < s.api_count; ++i) {
          s.retired_count[i] += ring->totals[i].count.load(std::memory_order_relaxed);
          s.retired_total[i] += ring->totals[i].total_ns.load(std::memory_order_relaxed);
        }
        s.retired_dropped += ring->dropped.load(std::memory_order_relaxed);
      }
      unlink_ring(ring);
      std::free(ring);
    }
    ring = next;
  }
}

std::uint64_t snapshot_totals(Session& s, std::uint64_t* dropped) {
  std::memcpy(s.snapshot_count, s.retired_count, s.api_count * sizeof(std::uint64_t));
  std::memcpy(s.snapshot_total, s.retired_total, s.api_count * sizeof(std::uint64_t));
  *dropped = s.retired_dropped;
  for (Ring* ring = registry_head(); ring != nullptr; ring = ring->next) {
    if (ring->session != s.id) continue;
    for (std::size_t i = 0; i < s.api_count; ++i) {
      s.snapshot_count[i] += ring->totals[i].count.load(std::memory_order_relaxed);
      s.snapshot_total[i] += ring->totals[i].total_ns.load(std::memory_order_relaxed);
    }
    *dropped += ring->dropped.load(std::memory_order_relaxed);
  }
  for (std::size_t i = 0; i < s.api_count; ++i) {
    const std::size_t target = s.canonical[i];
    if (target == i) continue;
    s.snapshot_count[target] += s.snapshot_count[i];
    s.snapshot_total[target] += s.snapshot_total[i];
    s.snapshot_count[i] = s.snapshot_total[i] = 0;
  }
  std::uint64_t count_sum = 0;
  for (std::size_t i = 0; i < s.api_count; ++i) count_sum += s.snapshot_count[i];
  return count_sum;
}

// Alnair's metrics format: three lines per API that was called.
std::size_t format_metrics(const Session& s, const std::uint64_t* count, const std::uint64_t* total,
                           std::size_t entries) {
  char* p = s.text_buffer;
  for (std::size_t i = 0; i < entries; ++i) {
    if (count[i] == 0) continue;
    const char* name = s.name(i);
    p = put_str(p, "name:", 5);
    p = put_str(p, name, i < s.api_count ? s.name_length[i] : std::strlen(name));
    p = put_str(p, "\ncount:", 7);
    p = put_u64(p, count[i]);
    p = put_str(p, "\nburst:", 7);
    p = put_u64(p, total[i]);
    *p++ = '\n';
  }
  return static_cast<std::size_t>(p - s.text_buffer);
}

// Reserves a per-process file name no other process (another container sharing the directory may
// have the same pid) and no earlier run uses.
bool claim_own_file(Session& s) {
  if (s.own_file_claimed) return true;
  const std::uint64_t pid = static_cast<std::uint64_t>(::getpid());
  for (std::uint64_t attempt = 0; attempt < 100; ++attempt) {
    char* p = put_str(s.own_file_name, "metrics.", 8);
    p = put_u64(p, pid);
    if (attempt > 0) {
      *p++ = '.';
      p = put_u64(p, attempt);
    }
    p = put_str(p, ".log", 4);
    *p = '\0';
    char path[PATH_MAX];
    if (!join_path(path, s.dir, s.own_file_name)) return false;
    int fd = ::open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::close(fd);
      s.own_file_claimed = true;
      return true;
    }
    if (errno != EEXIST) return false;
  }
  return false;
}

bool is_process_metrics_file(const char* name) {
  std::size_t length = std::strlen(name);
  return length > 12 && std::strncmp(name, "metrics.", 8) == 0 && std::strcmp(name + length - 4, ".log") == 0;
}

// Index of `name` among known and extra names, adding it as an extra if there is room; -1 if not.
long find_or_add_name(Session& s, const char* name, std::size_t length, std::size_t* hint) {
  if (length == 0 || length >= kMaxNameBytes) return -1;
  // Files written by the same library list names in our order, so the next index usually matches.
  for (std::size_t step = 0; step < s.api_count; ++step) {
    std::size_t i = (*hint + step) % s.api_count;
    if (s.name_length[i] == length && std::memcmp(s.name(i), name, length) == 0) {
      *hint = i + 1;
      return static_cast<long>(s.canonical[i]);
    }
  }
  for (std::size_t e = 0; e < s.extra_count; ++e) {
    const char* extra = s.name(s.api_count + e);
    if (std::strlen(extra) == length && std::memcmp(extra, name, length) == 0) {
      return static_cast<long>(s.api_count + e);
    }
  }
  if (s.extra_count == kMaxExtraNames) return -1;
  char* slot = s.extra_names + s.extra_count * kMaxNameBytes;
  std::memcpy(slot, name, length);
  slot[length] = '\0';
  return static_cast<long>(s.api_count + s.extra_count++);
}

void merge_line(Session& s, const char* line, const char* end, long* current, std::size_t* hint) {
  std::uint64_t value = 0;
  const std::size_t length = static_cast<std::size_t>(end - line);
  if (length > 5 && std::memcmp(line, "name:", 5) == 0) {
    *current = find_or_add_name(s, line + 5, length - 5, hint);
  } else if (*current >= 0 && length > 6 && std::memcmp(line, "count:", 6) == 0 &&
             parse_u64(line + 6, end, &value)) {
    s.merged_count[*current] = saturating_add(s.merged_count[*current], value);
  } else if (*current >= 0 && length > 6 && std::memcmp(line, "burst:", 6) == 0 &&
             parse_u64(line + 6, end, &value)) {
    s.merged_total[*current] = saturating_add(s.merged_total[*current], value);
  }
}

void merge_file(Session& s, int dir_fd, const char* name) {
  int fd = ::openat(dir_fd, name, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  long current = -1;
  std::size_t hint = 0;
  std::size_t kept = 0;  // bytes of an unfinished line carried to the next read
  bool skipping_long_line = false;
  for (;;) {
    ssize_t n = ::read(fd, s.read_buffer + kept, kReadBufferBytes - kept);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    const char* end = s.read_buffer + kept + n;
    const char* line = s.read_buffer;
    for (const char* p = line; p != end; ++p) {
      if (*p != '\n') continue;
      if (!skipping_long_line) merge_line(s, line, p, &current, &hint);
      skipping_long_line = false;
      line = p + 1;
    }
    kept = static_cast<std::size_t>(end - line);
    if (kept == kReadBufferBytes) {
      skipping_long_line = true;
      kept = 0;
    } else {
      std::memmove(s.read_buffer, line, kept);
    }
  }
  ::close(fd);
}

// metrics.log = sum of every metrics.<pid>.log in the directory, rebuilt under a lock so concurrent
// processes cannot publish a merge that misses the other's latest file.
void write_merged_metrics(Session& s) {
  char lock_path[PATH_MAX];
  if (!join_path(lock_path, s.dir, ".metrics.lock")) return;
  int lock_fd = ::open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0) return;
  while (::flock(lock_fd, LOCK_EX) != 0 && errno == EINTR) {
  }
  int dir_fd = ::open(s.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    const std::size_t slots = s.api_count + kMaxExtraNames;
    std::memset(s.merged_count, 0, slots * sizeof(std::uint64_t));
    std::memset(s.merged_total, 0, slots * sizeof(std::uint64_t));
    s.extra_count = 0;
    for (;;) {
      ssize_t n = ::getdents64(dir_fd, s.dirent_buffer, kDirentBufferBytes);
      if (n <= 0) break;
      for (ssize_t offset = 0; offset < n;) {
        const auto* entry = reinterpret_cast<const struct dirent64*>(s.dirent_buffer + offset);
        if (is_process_metrics_file(entry->d_name)) merge_file(s, dir_fd, entry->d_name);
        offset += entry->d_reclen;
      }
    }
    ::close(dir_fd);
    std::size_t length = format_metrics(s, s.merged_count, s.merged_total, s.api_count + s.extra_count);
    if (!replace_file(s.dir, ".metrics.log.tmp", "metrics.log", s.text_buffer, length)) {
      GS_LOG(Warn, "profiler: cannot write metrics.log in %s: %s", s.dir, std::strerror(errno));
    }
  }
  ::flock(lock_fd, LOCK_UN);
  ::close(lock_fd);
}

void write_own_metrics(Session& s) {
  if (!claim_own_file(s)) {
    GS_LOG(Warn, "profiler: cannot create a metrics file in %s: %s", s.dir, std::strerror(errno));
    return;
  }
  char temp_name[80];
  char* p = put_str(temp_name, ".", 1);
  p = put_str(p, s.own_file_name);
  p = put_str(p, ".tmp", 4);
  *p = '\0';
  std::size_t length = format_metrics(s, s.snapshot_count, s.snapshot_total, s.api_count);
  if (!replace_file(s.dir, temp_name, s.own_file_name, s.text_buffer, length)) {
    GS_LOG(Warn, "profiler: cannot write %s in %s: %s", s.own_file_name, s.dir, std::strerror(errno));
  }
}

void report_dropped(Session& s, std::uint64_t dropped) {
  if (dropped == s.last_reported_dropped) return;
  s.last_reported_dropped = dropped;
  char line[64];
  char* p = put_str(line, "pid:", 4);
  p = put_u64(p, static_cast<std::uint64_t>(::getpid()));
  p = put_str(p, " dropped:", 9);
  p = put_u64(p, dropped);
  *p++ = '\n';
  append_to_file(s.dir, "profiler.log", line, static_cast<std::size_t>(p - line));
}

// From a signal handler `in_signal` is set: rings are not freed then, because free() is not
// async-signal-safe (their totals are still counted, from the list).
void flush_locked(bool in_signal) {
  Session& s = g_session;
  for (Ring* ring = registry_head(); ring != nullptr; ring = ring->next) {
    if (ring->session == s.id) drain(s, ring);
  }
  if (!in_signal) reap_retired_rings(s);
  write_timeline_buffer(s);

  std::uint64_t dropped = 0;
  const std::uint64_t count_sum = snapshot_totals(s, &dropped);
  std::uint64_t total_sum = 0;
  for (std::size_t i = 0; i < s.api_count; ++i) total_sum += s.snapshot_total[i];
  if (count_sum != 0 && (count_sum != s.last_written_count_sum || total_sum != s.last_written_total_sum)) {
    write_own_metrics(s);
    write_merged_metrics(s);
    s.last_written_count_sum = count_sum;
    s.last_written_total_sum = total_sum;
  }
  report_dropped(s, dropped);
}

void flush_if_running(bool in_signal) {
  if (!g_running.load(std::memory_order_acquire)) return;
  Guard guard(&g_flush_mutex);
  if (g_running.load(std::memory_order_relaxed)) flush_locked(in_signal);
}

// Drains only when some ring is a quarter full, so bursts of short calls are not dropped between
// one-second flushes.
void drain_filling_rings() {
  if (!g_running.load(std::memory_order_acquire)) return;
  Guard guard(&g_flush_mutex);
  if (!g_running.load(std::memory_order_relaxed)) return;
  Session& s = g_session;
  bool drained = false;
  for (Ring* ring = registry_head(); ring != nullptr; ring = ring->next) {
    if (ring->session != s.id) continue;
    std::uint64_t used =
        ring->head.load(std::memory_order_acquire) - ring->tail.load(std::memory_order_relaxed);
    if (used >= s.ring_capacity / 4) {
      drain(s, ring);
      drained = true;
    }
  }
  if (drained) write_timeline_buffer(s);
}

// ---- background flusher ----

// True when every other thread of the process has ended. glibc ends the process when its last
// thread exits; our flusher must not be the thread that keeps it alive (main may pthread_exit).
// The thread-group leader stays listed as a zombie until the end, hence the second case.
bool only_flusher_left() {
  char buffer[1024];
  int fd = ::open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = ::read(fd, buffer, sizeof buffer - 1);
  ::close(fd);
  if (n <= 0) return false;
  buffer[n] = '\0';
  const char* p = std::strrchr(buffer, ')');
  if (p == nullptr || p[1] != ' ') return false;
  const char state = p[2];
  // After ") " come state (field 3) ... num_threads (field 20); each step lands before field `field`.
  for (int field = 3; field <= 20; ++field) {
    p = std::strchr(p + 1, ' ');
    if (p == nullptr) return false;
  }
  long threads = std::strtol(p + 1, nullptr, 10);
  return threads == 1 || (threads == 2 && state == 'Z');
}

void* flusher_main(void*) {
  pthread_setname_np(pthread_self(), "gpuslice-prof");  // recognisable in top -H, gdb
  std::uint64_t last_flush_ns = monotonic_ns();
  for (;;) {
    pthread_mutex_lock(&g_wake_mutex);
    timespec deadline{};
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_nsec += static_cast<long>(kDrainCheckNs);
    if (deadline.tv_nsec >= 1'000'000'000) {
      deadline.tv_sec += 1;
      deadline.tv_nsec -= 1'000'000'000;
    }
    while (!g_flusher_stop_requested) {
      if (pthread_cond_timedwait(&g_wake_cond, &g_wake_mutex, &deadline) == ETIMEDOUT) break;
    }
    const bool stop_requested = g_flusher_stop_requested;
    pthread_mutex_unlock(&g_wake_mutex);
    if (stop_requested) return nullptr;

    const std::uint64_t now = monotonic_ns();
    if (now - last_flush_ns >= kFlushIntervalNs) {
      last_flush_ns = now;
      flush_if_running(false);
      if (only_flusher_left()) return nullptr;  // exit handlers do the final flush
    } else {
      drain_filling_rings();
    }
  }
}

// Called with g_control_mutex held (or alone in a fork child).
void start_flusher() {
  pthread_mutex_lock(&g_wake_mutex);
  g_flusher_stop_requested = false;
  pthread_mutex_unlock(&g_wake_mutex);
  // The flusher must never be picked to run the application's signal handlers.
  sigset_t all;
  sigset_t previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  int error = pthread_create(&g_session.flusher, nullptr, flusher_main, nullptr);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  g_session.flusher_running = error == 0;
  if (error != 0)
    GS_LOG(Warn, "profiler: no background flusher (%s); files are written at exit", std::strerror(error));
}

void stop_flusher() {
  if (!g_session.flusher_running) return;
  pthread_mutex_lock(&g_wake_mutex);
  g_flusher_stop_requested = true;
  pthread_cond_signal(&g_wake_cond);
  pthread_mutex_unlock(&g_wake_mutex);
  // When the flusher was the last thread, glibc runs the exit handlers on it: it cannot join itself.
  if (!pthread_equal(pthread_self(), g_session.flusher)) pthread_join(g_session.flusher, nullptr);
  g_session.flusher_running = false;
}

// ---- signals ----

void on_termination_signal(int signal_number) {
  const int saved_errno = errno;
  // If this thread was interrupted while holding one of our locks, flushing here would deadlock.
  if (t_lock_depth == 0 && g_running.load(std::memory_order_acquire)) {
    lock(&g_flush_mutex);
    if (g_running.load(std::memory_order_relaxed)) flush_locked(true);
    unlock(&g_flush_mutex);
  }
  // Die the way the default disposition would have made us die.
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  sigaction(signal_number, &default_action, nullptr);
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, signal_number);
  pthread_sigmask(SIG_UNBLOCK, &only, nullptr);
  raise(signal_number);
  errno = saved_errno;
}

void install_signal_handlers() {
  for (std::size_t i = 0; i < sizeof kTerminationSignals / sizeof kTerminationSignals[0]; ++i) {
    struct sigaction current {};
    if (sigaction(kTerminationSignals[i], nullptr, &current) != 0) continue;
    const bool ours = !(current.sa_flags & SA_SIGINFO) && current.sa_handler == on_termination_signal;
    const bool untouched = !(current.sa_flags & SA_SIGINFO) && current.sa_handler == SIG_DFL;
    if (ours) {
      g_signal_installed[i] = true;
    } else if (untouched) {
      struct sigaction action {};
      action.sa_handler = on_termination_signal;
      sigemptyset(&action.sa_mask);
      action.sa_flags = SA_RESTART;
      g_signal_installed[i] = sigaction(kTerminationSignals[i], &action, nullptr) == 0;
    }
  }
}

void restore_signal_handlers() {
  for (std::size_t i = 0; i < sizeof kTerminationSignals / sizeof kTerminationSignals[0]; ++i) {
    if (!g_signal_installed[i]) continue;
    g_signal_installed[i] = false;
    struct sigaction current {};
    if (sigaction(kTerminationSignals[i], nullptr, &current) != 0) continue;
    // The application may have installed its own handler since; leave that alone.
    if ((current.sa_flags & SA_SIGINFO) || current.sa_handler != on_termination_signal) continue;
    struct sigaction default_action {};
    default_action.sa_handler = SIG_DFL;
    sigemptyset(&default_action.sa_mask);
    sigaction(kTerminationSignals[i], &default_action, nullptr);
  }
}

// ---- process-wide hooks: fork and exit ----

void before_fork() {
  lock(&g_control_mutex);
  lock(&g_flush_mutex);
  lock(&g_registry_mutex);
  lock(&g_wake_mutex);
}

void after_fork_parent() {
  unlock(&g_wake_mutex);
  unlock(&g_registry_mutex);
  unlock(&g_flush_mutex);
  unlock(&g_control_mutex);
}

// The child starts with empty buffers and totals: what the parent recorded is the parent's to
// write. Only this thread exists here, so the other threads' rings can be freed outright.
void after_fork_child() {
  const bool was_running = g_running.load(std::memory_order_relaxed);
  Session& s = g_session;
  if (was_running) {
    for (Ring* ring = g_rings; ring != nullptr;) {
      Ring* next = ring->next;
      std::free(ring);
      ring = next;
    }
    g_rings = nullptr;
    t_ring = nullptr;
    pthread_setspecific(g_thread_key, nullptr);
    s.id = g_session_id.load(std::memory_order_relaxed) + 1;
    g_session_id.store(s.id, std::memory_order_relaxed);
    std::memset(s.retired_count, 0, s.api_count * sizeof(std::uint64_t));
    std::memset(s.retired_total, 0, s.api_count * sizeof(std::uint64_t));
    s.retired_dropped = 0;
    s.last_written_count_sum = 0;
    s.last_written_total_sum = 0;
    s.last_reported_dropped = 0;
    s.own_file_claimed = false;
    s.timeline_used = 0;
    s.flusher_running = false;  // threads do not survive fork
  }
  g_refusal_lock.clear();
  pthread_condattr_t attributes;
  pthread_condattr_init(&attributes);
  pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC);
  pthread_cond_init(&g_wake_cond, &attributes);
  pthread_condattr_destroy(&attributes);
  g_flusher_stop_requested = false;
  after_fork_parent();
  if (was_running && s.options.background_flusher) {
    Guard guard(&g_control_mutex);
    start_flusher();
  }
}

// Exit handlers registered from main's lifetime run before the libraries' destructors, which may
// still make CUDA calls (freeing caches): flush here, stop for good in the destructor below.
void flush_at_exit() { flush_if_running(false); }

__attribute__((destructor)) void stop_at_unload() { stop(); }

void install_process_hooks_once() {
  if (g_process_hooks_installed) return;
  g_process_hooks_installed = true;
  pthread_condattr_t attributes;
  pthread_condattr_init(&attributes);
  pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC);
  pthread_cond_init(&g_wake_cond, &attributes);
  pthread_condattr_destroy(&attributes);
  pthread_key_create(&g_thread_key, on_thread_exit);
  pthread_atfork(before_fork, after_fork_parent, after_fork_child);
  std::atexit(flush_at_exit);
}

void release_session_buffers(Session& s) {
  std::free(s.name_storage);
  std::free(s.name_length);
  std::free(s.canonical);
  std::free(s.retired_count);
  std::free(s.retired_total);
  std::free(s.snapshot_count);
  std::free(s.snapshot_total);
  std::free(s.timeline_buffer);
  std::free(s.text_buffer);
  std::free(s.read_buffer);
  std::free(s.dirent_buffer);
  std::free(s.merged_count);
  std::free(s.merged_total);
  std::free(s.extra_names);
  s.name_storage = nullptr;
  s.name_length = nullptr;
  s.canonical = nullptr;
  s.retired_count = s.retired_total = s.snapshot_count = s.snapshot_total = nullptr;
  s.merged_count = s.merged_total = nullptr;
  s.timeline_buffer = s.text_buffer = s.read_buffer = s.dirent_buffer = s.extra_names = nullptr;
}

template <class T>
bool allocate_zeroed(T** out, std::size_t count) {
  *out = static_cast<T*>(std::calloc(count, sizeof(T)));
  return *out != nullptr;
}

bool allocate_session_buffers(Session& s, std::size_t api_count) {
  const std::size_t slots = api_count + kMaxExtraNames;
  s.text_capacity = slots * kLineSlack;
  s.dirent_buffer = static_cast<char*>(std::aligned_alloc(64, kDirentBufferBytes));
  return allocate_zeroed(&s.name_storage, api_count * kMaxNameBytes) &&
         allocate_zeroed(&s.name_length, api_count) && allocate_zeroed(&s.canonical, api_count) &&
         allocate_zeroed(&s.retired_count, api_count) && allocate_zeroed(&s.retired_total, api_count) &&
         allocate_zeroed(&s.snapshot_count, api_count) && allocate_zeroed(&s.snapshot_total, api_count) &&
         allocate_zeroed(&s.timeline_buffer, kTimelineBufferBytes) &&
         allocate_zeroed(&s.text_buffer, s.text_capacity) &&
         allocate_zeroed(&s.read_buffer, kReadBufferBytes) && s.dirent_buffer != nullptr &&
         allocate_zeroed(&s.merged_count, slots) && allocate_zeroed(&s.merged_total, slots) &&
         allocate_zeroed(&s.extra_names, kMaxExtraNames * kMaxNameBytes);
}

// Names go verbatim into "name:<api>" lines and space-separated timeline lines.
void copy_name(Session& s, std::size_t index, const char* name) {
  char* out = s.name_storage + index * kMaxNameBytes;
  std::size_t length = 0;
  if (name == nullptr || *name == '\0') {
    length = static_cast<std::size_t>(put_u64(put_str(out, "api_", 4), index) - out);
  } else {
    for (; name[length] != '\0' && length + 1 < kMaxNameBytes; ++length) {
      const char c = name[length];
      out[length] = (c == ' ' || c == '\t' || c == '\n' || c == '\r') ? '_' : c;
    }
  }
  out[length] = '\0';
  s.name_length[index] = length;
}

std::uint64_t round_up_power_of_two(std::size_t value) {
  std::uint64_t capacity = 2;
  while (capacity < value && capacity < (std::uint64_t{1} << 30)) capacity <<= 1;
  return capacity;
}

// Fills s.canonical with a hash table of the names (open addressing, FNV-1a); false on no memory.
bool find_canonical_ids(Session& s) {
  const std::uint64_t slots = round_up_power_of_two(2 * s.api_count);
  auto* table = static_cast<std::uint32_t*>(std::malloc(slots * sizeof(std::uint32_t)));
  if (table == nullptr) return false;
  constexpr std::uint32_t kEmpty = UINT32_MAX;
  for (std::uint64_t i = 0; i < slots; ++i) table[i] = kEmpty;
  for (std::size_t id = 0; id < s.api_count; ++id) {
    const char* name = s.name(id);
    std::uint64_t hash = 1469598103934665603ULL;
    for (std::size_t k = 0; k < s.name_length[id]; ++k)
      hash = (hash ^ static_cast<unsigned char>(name[k])) * 1099511628211ULL;
    for (std::uint64_t slot = hash & (slots - 1);; slot = (slot + 1) & (slots - 1)) {
      if (table[slot] == kEmpty) {
        table[slot] = static_cast<std::uint32_t>(id);
        s.canonical[id] = static_cast<std::uint32_t>(id);
        break;
      }
      const std::uint32_t other = table[slot];
      if (s.name_length[other] == s.name_length[id] &&
          std::memcmp(s.name(other), name, s.name_length[id]) == 0) {
        s.canonical[id] = other;
        break;
      }
    }
  }
  std::free(table);
  return true;
}

}  // namespace

bool start(const char* dir, const char* const* api_names, std::size_t api_count) {
  return start(dir, api_names, api_count, Options{});
}

bool start(const char* dir, const char* const* api_names, std::size_t api_count, const Options& options) {
  if (dir == nullptr || *dir == '\0' || api_names == nullptr || api_count == 0 || api_count > kMaxApis) {
    GS_LOG(Error, "profiler: invalid start arguments (dir '%s', %zu APIs)", dir == nullptr ? "" : dir,
           api_count);
    return false;
  }
  if (std::strlen(dir) + 64 >= PATH_MAX) {
    GS_LOG(Error, "profiler: profile directory path too long: %s", dir);
    return false;
  }
  Guard control(&g_control_mutex);
  install_process_hooks_once();
  if (g_running.load(std::memory_order_relaxed)) {
    GS_LOG(Warn, "profiler: already started, not starting again into %s", dir);
    return false;
  }
  if (!make_directories(dir)) {
    GS_LOG(Error, "profiler: cannot create profile directory %s: %s", dir, std::strerror(errno));
    return false;
  }
  char timeline_path[PATH_MAX];
  join_path(timeline_path, dir, "timeline.log");
  int timeline_fd = ::open(timeline_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (timeline_fd < 0) {
    GS_LOG(Error, "profiler: cannot open %s: %s", timeline_path, std::strerror(errno));
    return false;
  }
  {
    Guard flush_guard(&g_flush_mutex);
    Guard registry_guard(&g_registry_mutex);
    Session& s = g_session;
    release_session_buffers(s);
    bool allocated = allocate_session_buffers(s, api_count);
    if (allocated) {
      s.api_count = api_count;
      for (std::size_t i = 0; i < api_count; ++i) copy_name(s, i, api_names[i]);
      allocated = find_canonical_ids(s);
    }
    if (!allocated) {
      release_session_buffers(s);
      s.api_count = 0;
      ::close(timeline_fd);
      GS_LOG(Error, "profiler: out of memory starting the profiler");
      return false;
    }
    s.id = g_session_id.load(std::memory_order_relaxed) + 1;
    s.options = options;
    std::memcpy(s.dir, dir, std::strlen(dir) + 1);
    s.ring_capacity = round_up_power_of_two(options.ring_events);
    s.timeline_fd = timeline_fd;
    s.retired_dropped = 0;
    s.last_written_count_sum = s.last_written_total_sum = s.last_reported_dropped = 0;
    s.own_file_claimed = false;
    s.timeline_used = 0;
    s.timeline_error_logged = false;
    g_session_id.store(s.id, std::memory_order_relaxed);
    g_running.store(true, std::memory_order_release);
  }
  if (options.handle_termination_signals) install_signal_handlers();
  if (options.background_flusher) start_flusher();
  g_enabled.store(true, std::memory_order_release);
  GS_LOG(Info, "profiler: writing per-API profile to %s", dir);
  return true;
}

void record(std::uint16_t api_id, std::uint64_t start_epoch_ns, std::uint64_t duration_ns) {
  Ring* ring = t_ring;
  if (ring == nullptr || ring->session != g_session_id.load(std::memory_order_relaxed)) [[unlikely]] {
    ring = register_thread();
    if (ring == nullptr) return;
  }
  if (api_id >= ring->api_count) [[unlikely]]
    return;
  ApiTotals& totals = ring->totals[api_id];
  totals.count.store(totals.count.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  totals.total_ns.store(totals.total_ns.load(std::memory_order_relaxed) + duration_ns,
                        std::memory_order_relaxed);

  const std::uint64_t head = ring->head.load(std::memory_order_relaxed);
  if (head - ring->cached_tail > ring->mask) [[unlikely]] {
    ring->cached_tail = ring->tail.load(std::memory_order_acquire);
    if (head - ring->cached_tail > ring->mask) {
      ring->dropped.store(ring->dropped.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      return;
    }
  }
  Event& event = ring->events[head & ring->mask];
  event.start_epoch_ns = start_epoch_ns;
  event.id_and_duration =
      (std::uint64_t{api_id} << kDurationBits) | (duration_ns < kMaxDuration ? duration_ns : kMaxDuration);
  ring->head.store(head + 1, std::memory_order_release);
}

void flush() { flush_if_running(false); }

void stop() {
  Guard control(&g_control_mutex);
  if (!g_running.load(std::memory_order_relaxed)) return;
  g_enabled.store(false, std::memory_order_relaxed);
  stop_flusher();
  {
    Guard flush_guard(&g_flush_mutex);
    flush_locked(false);
    g_running.store(false, std::memory_order_release);
    ::close(g_session.timeline_fd);
    g_session.timeline_fd = -1;
  }
  restore_signal_handlers();
}

bool running() { return g_running.load(std::memory_order_acquire); }

std::uint64_t dropped_events() {
  Guard flush_guard(&g_flush_mutex);
  Guard registry_guard(&g_registry_mutex);
  std::uint64_t dropped = g_session.retired_dropped;
  for (Ring* ring = g_rings; ring != nullptr; ring = ring->next) {
    if (ring->session == g_session.id) dropped += ring->dropped.load(std::memory_order_relaxed);
  }
  return dropped;
}

void log_refused_allocation(int device, std::uint64_t requested, std::uint64_t quota, std::uint64_t in_use,
                            const char* top_users) {
  log_refused_allocation_at(device, requested, quota, in_use, top_users, monotonic_ns());
}

bool log_refused_allocation_at(int device, std::uint64_t requested, std::uint64_t quota, std::uint64_t in_use,
                               const char* top_users, std::uint64_t now_monotonic_ns) {
  while (g_refusal_lock.test_and_set(std::memory_order_acquire)) {
  }
  const RefusalLimiter::Verdict verdict = g_refusals.admit(device, requested, now_monotonic_ns);
  g_refusal_lock.clear(std::memory_order_release);
  if (!verdict.report) return false;

  // One line of free text; a newline in it would forge a second event.
  char users[kMaxTopUsersBytes];
  std::size_t users_length = 0;
  if (top_users != nullptr) {
    for (; top_users[users_length] != '\0' && users_length + 1 < sizeof users; ++users_length) {
      const char c = top_users[users_length];
      users[users_length] = (c == '\n' || c == '\r') ? ' ' : c;
    }
  }
  users[users_length] = '\0';

  GS_LOG(Warn,
         "allocation of %llu bytes refused on device %d: quota %llu bytes, %llu in use; top users: %s"
         " (%llu similar refusals not reported)",
         static_cast<unsigned long long>(requested), device, static_cast<unsigned long long>(quota),
         static_cast<unsigned long long>(in_use), users_length ? users : "-",
         static_cast<unsigned long long>(verdict.suppressed_before));

  if (!g_running.load(std::memory_order_acquire)) return true;
  char line[kMaxTopUsersBytes + 256];
  char* p = put_str(line, "time:", 5);
  p = put_u64(p, realtime_ns());
  p = put_str(p, " pid:", 5);
  p = put_u64(p, static_cast<std::uint64_t>(::getpid()));
  p = put_str(p, " event:allocation_refused device:");
  if (device < 0) *p++ = '-';
  p = put_u64(p, device < 0 ? 0 - static_cast<std::uint64_t>(device) : static_cast<std::uint64_t>(device));
  p = put_str(p, " requested:");
  p = put_u64(p, requested);
  p = put_str(p, " quota:");
  p = put_u64(p, quota);
  p = put_str(p, " in_use:");
  p = put_u64(p, in_use);
  p = put_str(p, " suppressed:");
  p = put_u64(p, verdict.suppressed_before);
  p = put_str(p, " top:");
  p = put_str(p, users, users_length);
  *p++ = '\n';
  Guard flush_guard(&g_flush_mutex);  // keeps the directory stable against a concurrent restart
  if (g_running.load(std::memory_order_relaxed)) {
    append_to_file(g_session.dir, "events.log", line, static_cast<std::size_t>(p - line));
  }
  return true;
}

}  // namespace gpuslice::profiler
