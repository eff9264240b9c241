// Per-thread rings: the lock-free, allocation-free record() hot path and the registry of rings.
#include "profiler/event_rings.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <new>

#include "profiler/profiler.h"

namespace gpuslice::profiler {
namespace detail {

pthread_mutex_t g_registry_mutex = PTHREAD_MUTEX_INITIALIZER;
std::atomic<std::uint32_t> g_session_id{0};

namespace {

// Static storage with trivial destructors: the flusher may still walk the list while the process exits.
Ring* g_rings = nullptr;
pthread_key_t g_thread_key;
thread_local Ring* t_ring = nullptr;

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
  ring->tid = static_cast<std::uint32_t>(syscall(SYS_gettid));
  ring->next = g_rings;
  g_rings = ring;
  // A ring of an earlier session (start after stop) is abandoned by this thread.
  if (t_ring != nullptr) t_ring->retired.store(true, std::memory_order_release);
  t_ring = ring;
  pthread_setspecific(g_thread_key, ring);
  return ring;
}

}  // namespace

Ring* registry_head() {
  Guard guard(&g_registry_mutex);
  return g_rings;
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

void create_thread_exit_key() { pthread_key_create(&g_thread_key, on_thread_exit); }

void free_rings_in_fork_child() {
  for (Ring* ring = g_rings; ring != nullptr;) {
    Ring* next = ring->next;
    std::free(ring);
    ring = next;
  }
  g_rings = nullptr;
  t_ring = nullptr;
  pthread_setspecific(g_thread_key, nullptr);
}

}  // namespace detail

using namespace detail;

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

std::uint64_t dropped_events() {
  Guard flush_guard(&g_flush_mutex);
  Guard registry_guard(&g_registry_mutex);
  std::uint64_t dropped = g_session.retired_dropped;
  for (Ring* ring = g_rings; ring != nullptr; ring = ring->next) {
    if (ring->session == g_session.id) dropped += ring->dropped.load(std::memory_order_relaxed);
  }
  return dropped;
}

}  // namespace gpuslice::profiler
