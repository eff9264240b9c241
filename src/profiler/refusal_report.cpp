// Refused allocations: one warning and one events.log line each, rate-limited (refusal_limiter.h).
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "common/clock.h"
#include "common/log.h"
#include "profiler/profile_dir.h"
#include "profiler/profiler.h"
#include "profiler/refusal_limiter.h"
#include "profiler/session.h"
#include "profiler/text.h"

namespace gpuslice::profiler {
namespace detail {
namespace {

std::atomic_flag g_refusal_lock = ATOMIC_FLAG_INIT;
RefusalLimiter g_refusals;

}  // namespace

void reset_refusal_lock_after_fork() { g_refusal_lock.clear(); }

}  // namespace detail

using namespace detail;

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
    append_to_file(g_session.dir_fd, g_session.dir, "events.log", line, static_cast<std::size_t>(p - line));
  }
  return true;
}

}  // namespace gpuslice::profiler
