// Flushing without allocating (a signal handler may flush): timeline lines, totals, dropped counts.
#include "profiler/flush_writer.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/errno_text.h"
#include "common/log.h"
#include "profiler/event_rings.h"
#include "profiler/metrics_file.h"
#include "profiler/session.h"
#include "profiler/text.h"

namespace gpuslice::profiler::detail {
namespace {

void write_timeline_buffer(Session& s) {
  if (s.timeline_used == 0) return;
  // One write(2) of whole lines: with O_APPEND, lines of several processes never interleave.
  if (!write_all(s.timeline_fd, s.timeline_buffer, s.timeline_used) && !s.timeline_error_logged) {
    s.timeline_error_logged = true;
    GS_LOG(Warn, "profiler: cannot write timeline.log in %s: %s", s.dir, fs::errno_name(errno));
  }
  s.timeline_used = 0;
}

void drain(Session& s, Ring* ring) {
  std::uint64_t tail = ring->tail.load(std::memory_order_relaxed);
  const std::uint64_t head = ring->head.load(std::memory_order_acquire);
  const auto pid = static_cast<std::uint64_t>(getpid());
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
    // Beyond Alnair's three fields: which process and thread made the call (trace tracks).
    p = put_str(p, " pid:", 5);
    p = put_u64(p, pid);
    p = put_str(p, " tid:", 5);
    p = put_u64(p, ring->tid);
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

}  // namespace

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

}  // namespace gpuslice::profiler::detail
