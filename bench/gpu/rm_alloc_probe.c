/* rm_alloc_probe.so: a research probe (issue 42), never part of libgpuslice.so. Preloaded into a CUDA
 * process, it interposes libc's ioctl() and keeps books of what libcuda asks NVIDIA's resource manager (RM)
 * for: every RM_ALLOC / RM_ALLOC_MEMORY / VID_HEAP_CONTROL of a memory class with its size (read back after
 * the call: the size the RM allocated), every RM_FREE (a parent's free retires its memory children), the
 * running sum of device-local bytes and its peak, counts and nanoseconds inside the real ioctl per escape,
 * the _IOC_SIZE seen per escape (ABI evidence) and RM statuses. Decoding: rm_alloc_decode.c.
 *
 *   RM_PROBE_LOG=/tmp/rm LD_PRELOAD=./rm_alloc_probe.so prog    -> /tmp/rm.<pid>
 *
 * Log lines (append-only, one file per pid, CLOCK_MONOTONIC ns): "H" once, "E" per memory alloc/free
 * (drained from a lock-free ring), "S" every 50 ms (sampler thread started on the first NVIDIA ioctl), and at
 * exit "T" per escape, "C" per class, "X" the totals. A SIGKILLed process keeps its lines up to the last
 * tick.
 *
 * Limits: it sees only ioctls made through the dynamic ioctl symbol (bench/gpu/rm_alloc_round.sh checks that
 * libcuda imports it; a raw syscall is invisible, as are allocations the kernel makes for itself: channel
 * and context buffers, page tables, UVM's own vidmem). It trusts the RM's answers: a struct is read only at
 * the exact size the kernel accepts and after the kernel answered 0, nested parameters only after NV_OK.
 *
 * File descriptors are classified lazily by readlink(/proc/self/fd/N) on their first ioctl and cached, with
 * close/dup2/dup3/close_range interposed to forget a number: unlike hooking open/open64/openat/__open_2/...,
 * it sees fds however they were made (raw syscalls, inherited, passed over sockets) for one readlink per fd.
 * RM_PROBE_DEV_PREFIX (default "/dev/") lets the host test stand in for /dev/nvidia*.
 * RM_PROBE_DENY_LOCAL_ABOVE=<bytes> (research mode): video-memory allocations that would take the sum above
 * it are answered with the RM's NV_ERR_NO_MEMORY without reaching the kernel, to see how libcuda takes it. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rm_alloc_decode.h"

#define EXPORT __attribute__((visibility("default")))
#define FD_CACHE 65536

static struct rmp_books g_books;
static _Atomic unsigned char g_fd_kind[FD_CACHE];
typedef int (*ioctl_fn)(int, unsigned long, ...);
typedef int (*close_fn)(int);
typedef int (*dup2_fn)(int, int);
typedef int (*dup3_fn)(int, int, int);
typedef int (*close_range_fn)(unsigned, unsigned, int);
static _Atomic(ioctl_fn) g_real_ioctl;
static _Atomic(close_fn) g_real_close;
static _Atomic(dup2_fn) g_real_dup2;
static _Atomic(dup3_fn) g_real_dup3;
static _Atomic(close_range_fn) g_real_close_range;
static _Atomic int g_started;       /* 0 none, 1 started (or no log wanted) */
static _Atomic int g_reset_pending; /* a forked child starts its own books at its first NVIDIA ioctl */
static _Atomic int g_stop;
static atomic_flag g_writing = ATOMIC_FLAG_INIT;
static _Atomic uint64_t g_readlink_failures;
static _Atomic int g_log_fd = -1;
static _Atomic uint64_t g_stale_fds; /* fds cached as not NVIDIA's that turned out to be */
static uint64_t g_drained;
static uint64_t g_lost;

static void* next_symbol(const char* name) { return dlsym(RTLD_NEXT, name); }
#define REAL(var, type, name)                                   \
  type fn = atomic_load_explicit(&(var), memory_order_acquire); \
  if (fn == NULL) {                                             \
    fn = (type)next_symbol(name);                               \
    atomic_store_explicit(&(var), fn, memory_order_release);    \
  }

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static const char* dev_prefix(void) {
  static _Atomic(const char*) prefix;
  const char* p = atomic_load_explicit(&prefix, memory_order_acquire);
  if (p == NULL) {
    p = getenv("RM_PROBE_DEV_PREFIX");
    if (p == NULL || *p == '\0') p = "/dev/";
    atomic_store_explicit(&prefix, p, memory_order_release);
  }
  return p;
}

/* RM_PROBE_DENY_LOCAL_ABOVE=<bytes>: refuse video memory above that sum (research mode); -1 when unset. */
static int64_t deny_limit(void) {
  static _Atomic int64_t limit = -2;
  int64_t v = atomic_load_explicit(&limit, memory_order_relaxed);
  if (v == -2) {
    const char* s = getenv("RM_PROBE_DENY_LOCAL_ABOVE");
    char* end = NULL;
    v = -1;
    if (s != NULL && *s != '\0') {
      const unsigned long long n = strtoull(s, &end, 0);
      if (end != NULL && *end == '\0' && n < (1ull << 62)) v = (int64_t)n;
    }
    atomic_store_explicit(&limit, v, memory_order_relaxed);
  }
  return v;
}

/* An fd cached as not NVIDIA's is looked at again when an 'F' request comes on it: its number may have been
 * closed inside libc (fclose, closedir use libc's own close, not this one) and reused by /dev/nvidia*. */
static int classify_fd(int fd, unsigned long request) {
  if (fd < 0) return RMP_FD_OTHER;
  int cached = RMP_FD_UNKNOWN;
  if (fd < FD_CACHE) {
    cached = atomic_load_explicit(&g_fd_kind[fd], memory_order_relaxed);
    if (cached != RMP_FD_UNKNOWN &&
        (cached != RMP_FD_OTHER || ((request >> 8) & 0xffu) != RMP_NV_IOCTL_MAGIC))
      return cached;
  }
  char link[32] = "/proc/self/fd/";
  char digits[12];
  int n = 0;
  for (unsigned v = (unsigned)fd; n == 0 || v != 0; v /= 10) digits[n++] = (char)('0' + v % 10);
  size_t len = strlen(link);
  while (n > 0) link[len++] = digits[--n];
  link[len] = '\0';
  char path[256];
  const ssize_t got = readlink(link, path, sizeof path - 1);
  int k = RMP_FD_OTHER;
  if (got < 0) {
    atomic_fetch_add_explicit(&g_readlink_failures, 1, memory_order_relaxed);
  } else {
    path[got] = '\0';
    k = rmp_classify_path(path, dev_prefix());
  }
  if (cached == RMP_FD_OTHER && k != RMP_FD_OTHER)
    atomic_fetch_add_explicit(&g_stale_fds, 1, memory_order_relaxed);
  if (fd < FD_CACHE) atomic_store_explicit(&g_fd_kind[fd], (unsigned char)k, memory_order_relaxed);
  return k;
}

/* The application closes or replaces a number: forget its kind; if it was the log's, stop writing there. */
static void forget_fd(int fd) {
  if (fd >= 0 && fd < FD_CACHE) atomic_store_explicit(&g_fd_kind[fd], RMP_FD_UNKNOWN, memory_order_relaxed);
  int log = fd;
  if (fd >= 0) atomic_compare_exchange_strong(&g_log_fd, &log, -1);
}

/* ---- the log ---- */

static void put(const char* line, int n) {
  const int fd = atomic_load(&g_log_fd);
  if (fd < 0 || n <= 0) return;
  if (n > 1023) n = 1023;
  while (n > 0) {
    const ssize_t w = write(fd, line, (size_t)n);
    if (w <= 0 && errno != EINTR) return;
    if (w > 0) line += w, n -= (int)w;
  }
}

static const char* where_name(uint32_t w) {
  static const char* names[] = {"none", "local", "system", "virtual", "other", "dup"};
  return w < 6 ? names[w] : "?";
}

static void drain_events(void) {
  struct rmp_books* b = &g_books;
  const uint64_t next = atomic_load_explicit(&b->event_next, memory_order_acquire);
  if (next - g_drained > RMP_EVENTS) {
    g_lost += next - RMP_EVENTS - g_drained;
    g_drained = next - RMP_EVENTS;
  }
  char line[1024];
  while (g_drained < next) {
    const struct rmp_event* e = &b->events[g_drained % RMP_EVENTS];
    const uint64_t seq = atomic_load_explicit(&e->seq, memory_order_acquire);
    if (seq < g_drained + 1) break; /* still being written: next tick */
    struct rmp_event copy;
    memcpy(&copy, (const void*)e, sizeof copy);
    if (seq > g_drained + 1 || atomic_load_explicit(&e->seq, memory_order_acquire) != seq) {
      ++g_lost; /* overwritten by a later event */
      ++g_drained;
      continue;
    }
    const int n = snprintf(
        line, sizeof line,
        "E op=%c t0=%llu t1=%llu cls=0x%x client=0x%x h=0x%x bytes=%llu where=%s local=%lld\n", (char)copy.op,
        (unsigned long long)copy.t0, (unsigned long long)copy.t1, copy.cls, copy.client, copy.handle,
        (unsigned long long)copy.bytes, where_name(copy.where), (long long)copy.local_after);
    put(line, n);
    ++g_drained;
  }
}

static void sample_line(void) {
  struct rmp_books* b = &g_books;
  char line[1024];
  uint64_t ioctls = 0;
  for (int i = 0; i < RMP_ESC; ++i) ioctls += atomic_load_explicit(&b->esc[i].count, memory_order_relaxed);
  const int n = snprintf(
      line, sizeof line,
      "S t=%llu local=%lld local_peak=%lld system=%lld dup=%lld local_allocs=%llu local_frees=%llu "
      "implicit=%llu "
      "nv_ioctls=%llu uvm_ioctls=%llu lost=%llu\n",
      (unsigned long long)now_ns(), (long long)atomic_load(&b->local_bytes),
      (long long)atomic_load(&b->local_peak), (long long)atomic_load(&b->system_bytes),
      (long long)atomic_load(&b->dup_bytes), (unsigned long long)atomic_load(&b->local_allocs),
      (unsigned long long)atomic_load(&b->local_frees), (unsigned long long)atomic_load(&b->implicit_frees),
      (unsigned long long)ioctls, (unsigned long long)atomic_load(&b->uvm_count), (unsigned long long)g_lost);
  put(line, n);
}

static void summary_lines(void) {
  struct rmp_books* b = &g_books;
  char line[1024];
  for (unsigned i = 0; i < RMP_ESC; ++i) {
    const struct rmp_esc_stat* e = &b->esc[i];
    const uint64_t count = atomic_load(&e->count);
    if (count == 0) continue;
    const uint32_t first = atomic_load(&e->size_first), other = atomic_load(&e->size_other);
    const int n = snprintf(line, sizeof line,
                           "T esc=0x%x name=%s count=%llu ns=%llu size=%u other_size=%d rm_errors=%llu "
                           "last_rm_status=0x%x sys_errors=%llu\n",
                           i, rmp_escape_name(i), (unsigned long long)count,
                           (unsigned long long)atomic_load(&e->ns), first ? first - 1 : 0,
                           other ? (int)other - 1 : -1, (unsigned long long)atomic_load(&e->rm_errors),
                           atomic_load(&e->last_rm_status), (unsigned long long)atomic_load(&e->sys_errors));
    put(line, n);
  }
  for (unsigned i = 0; i < RMP_CLASSES; ++i) {
    const struct rmp_class_stat* c = &b->classes[i];
    const uint32_t key = atomic_load(&c->key);
    if (key == 0) continue;
    const int n =
        snprintf(line, sizeof line, "C cls=0x%x count=%llu bytes=%llu\n", key - 1,
                 (unsigned long long)atomic_load(&c->count), (unsigned long long)atomic_load(&c->bytes));
    put(line, n);
  }
  const int n = snprintf(
      line, sizeof line,
      "X version=%.63s abi_major=%d uvm_count=%llu uvm_ns=%llu nv_other_count=%llu type_mismatch=%llu "
      "xfer=%llu "
      "undecoded=%llu abi_skipped=%llu untracked_frees=%llu objects_full=%llu classes_full=%llu "
      "events_lost=%llu "
      "readlink_failures=%llu stale_fds=%llu finn_serialized=%llu denied=%llu denied_bytes=%llu local=%lld "
      "local_peak=%lld "
      "system_peak=%lld\n",
      b->version[0] ? b->version : "unseen", atomic_load(&b->abi_major),
      (unsigned long long)atomic_load(&b->uvm_count), (unsigned long long)atomic_load(&b->uvm_ns),
      (unsigned long long)atomic_load(&b->nv_other_count), (unsigned long long)atomic_load(&b->type_mismatch),
      (unsigned long long)atomic_load(&b->xfer), (unsigned long long)atomic_load(&b->undecoded),
      (unsigned long long)atomic_load(&b->abi_skipped), (unsigned long long)atomic_load(&b->untracked_frees),
      (unsigned long long)atomic_load(&b->objects_full), (unsigned long long)atomic_load(&b->classes_full),
      (unsigned long long)g_lost, (unsigned long long)atomic_load(&g_readlink_failures),
      (unsigned long long)atomic_load(&g_stale_fds), (unsigned long long)atomic_load(&b->finn_serialized),
      (unsigned long long)atomic_load(&b->denied), (unsigned long long)atomic_load(&b->denied_bytes),
      (long long)atomic_load(&b->local_bytes), (long long)atomic_load(&b->local_peak),
      (long long)atomic_load(&b->system_peak));
  put(line, n);
}

static void* sampler(void* unused) {
  (void)unused;
  while (!atomic_load(&g_stop)) {
    const struct timespec tick = {0, 50L * 1000 * 1000};
    nanosleep(&tick, NULL);
    if (atomic_flag_test_and_set(&g_writing)) continue; /* the exit handler owns the log now */
    if (!atomic_load(&g_stop)) {
      drain_events();
      sample_line();
    }
    atomic_flag_clear(&g_writing);
  }
  return NULL;
}

static void start_once(void) {
  if (atomic_load_explicit(&g_reset_pending, memory_order_acquire)) {
    int one = 1;
    if (atomic_compare_exchange_strong(&g_reset_pending, &one, 0)) {
      /* The driver (and its version string, sent once per process) stays the parent's. */
      char version[sizeof g_books.version];
      memcpy(version, g_books.version, sizeof version);
      const int major = atomic_load(&g_books.abi_major);
      memset((void*)&g_books, 0, sizeof g_books);
      memcpy(g_books.version, version, sizeof version);
      atomic_store(&g_books.abi_major, major);
      g_drained = g_lost = 0;
    }
  }
  int zero = 0;
  if (atomic_load_explicit(&g_started, memory_order_relaxed) ||
      !atomic_compare_exchange_strong(&g_started, &zero, 1))
    return;
  const char* base = getenv("RM_PROBE_LOG");
  if (base == NULL || *base == '\0') return;
  char path[4096];
  const int n = snprintf(path, sizeof path, "%s.%d", base, (int)getpid());
  if (n <= 0 || n >= (int)sizeof path) return;
  g_log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (g_log_fd < 0) return;
  char line[256];
  put(line, snprintf(line, sizeof line, "H pid=%d t=%llu clock=CLOCK_MONOTONIC\n", (int)getpid(),
                     (unsigned long long)now_ns()));
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old); /* the sampler never takes the application's signals */
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, (size_t)256 * 1024);
  pthread_create(&t, &attr, sampler, NULL);
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void after_fork_child(void) {
  if (g_log_fd >= 0) {
    close(g_log_fd);
    g_log_fd = -1;
  }
  atomic_store(&g_stop, 0);
  atomic_flag_clear(&g_writing);
  atomic_store(&g_reset_pending, 1);
  atomic_store(&g_started, 0);
}

__attribute__((constructor)) static void probe_init(void) { pthread_atfork(NULL, NULL, after_fork_child); }

__attribute__((destructor)) static void probe_fini(void) {
  if (g_log_fd < 0) return;
  atomic_store(&g_stop, 1);
  for (int i = 0; i < 2000 && atomic_flag_test_and_set(&g_writing); ++i) {
    const struct timespec wait = {0, 100L * 1000};
    nanosleep(&wait, NULL);
  }
  drain_events();
  sample_line();
  summary_lines();
}

/* For the cost program (rm_alloc_cost.cu, through dlsym): 0..255 an escape's count on nvidiactl/nvidia<N>,
 * 256 ioctls on nvidia-uvm, 257 all escapes, 258 the device-local sum in bytes, 259 ioctls on other NVIDIA
 * devices. */
EXPORT uint64_t rm_probe_count(int which) {
  if (which >= 0 && which < RMP_ESC) return atomic_load(&g_books.esc[which].count);
  if (which == 256) return atomic_load(&g_books.uvm_count);
  if (which == 257) {
    uint64_t n = 0;
    for (int i = 0; i < RMP_ESC; ++i) n += atomic_load(&g_books.esc[i].count);
    return n;
  }
  if (which == 258) return (uint64_t)atomic_load(&g_books.local_bytes);
  if (which == 259) return atomic_load(&g_books.nv_other_count);
  return 0;
}

/* ---- the interposed calls ---- */

EXPORT int ioctl(int fd, unsigned long request, ...) {
  va_list ap;
  va_start(ap, request);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  REAL(g_real_ioctl, ioctl_fn, "ioctl");
  if (fn == NULL) {
    errno = ENOSYS;
    return -1;
  }
  const int kind = classify_fd(fd, request);
  if (kind == RMP_FD_OTHER) return fn(fd, request, arg);
  start_once();
  const int64_t limit = deny_limit();
  if (limit >= 0 && rmp_deny(&g_books, kind, request, arg, limit, now_ns())) return 0;
  const uint64_t t0 = now_ns();
  const int rc = fn(fd, request, arg);
  const int saved = errno;
  const uint64_t t1 = now_ns();
  rmp_account(&g_books, kind, request, arg, rc, t0, t1);
  errno = saved;
  return rc;
}

EXPORT int close(int fd) {
  REAL(g_real_close, close_fn, "close");
  forget_fd(fd);
  const int rc = fn != NULL ? fn(fd) : (errno = ENOSYS, -1);
  forget_fd(fd);
  return rc;
}

EXPORT int dup2(int oldfd, int newfd) {
  REAL(g_real_dup2, dup2_fn, "dup2");
  const int rc = fn != NULL ? fn(oldfd, newfd) : (errno = ENOSYS, -1);
  forget_fd(newfd);
  return rc;
}

EXPORT int dup3(int oldfd, int newfd, int flags) {
  REAL(g_real_dup3, dup3_fn, "dup3");
  const int rc = fn != NULL ? fn(oldfd, newfd, flags) : (errno = ENOSYS, -1);
  forget_fd(newfd);
  return rc;
}

EXPORT int close_range(unsigned first, unsigned last, int flags) {
  REAL(g_real_close_range, close_range_fn, "close_range");
  const int rc = fn != NULL ? fn(first, last, flags) : (errno = ENOSYS, -1);
  for (unsigned fd = first; fd <= last && fd < FD_CACHE; ++fd) forget_fd((int)fd);
  return rc;
}
