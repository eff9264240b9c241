#include "interposer/reclaim/reclaim_engine.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <new>
#include <vector>

#include "common/clock.h"
#include "common/log.h"
#include "interposer/background_thread.h"
#include "interposer/devices.h"
#include "interposer/hooks.h"
#include "interposer/launch_flag.h"
#include "interposer/memory_books.h"
#include "interposer/node_presence.h"
#include "interposer/real_symbols.h"
#include "interposer/reclaim/host_room.h"
#include "interposer/reclaim/reclaim_ask.h"
#include "interposer/reclaim/reclaim_board.h"
#include "interposer/reclaim/reclaim_plan.h"
#include "interposer/runtime.h"
#include "shared_state/layout.h"
#include "shared_state/ledger.h"

namespace gpuslice::interposer::reclaim {

std::atomic<bool> g_borrower{false};

namespace {

constexpr int kRecords = static_cast<int>(shm::layout::kMaxDeviceRecords);
// Restore waits until no asker was seen for this long, and leaves this share of the device free.
constexpr std::uint64_t kRestoreQuietNs = 300'000'000ULL;
constexpr std::uint64_t kRestoreMarginDivisor = 32;
// A move copies in pieces of this size: copy engines are time-sliced between contexts, and another
// tenant's copy (a server's answer) waits for the piece in flight, not the whole allocation (2 GiB
// took 39 ms on an H200; 16 MiB takes 0.3 ms).
constexpr std::uint64_t kMovePiece = 16ULL << 20;

// Copies `size` bytes piece by piece, each finished before the next is issued.
bool copy_in_pieces(CUdeviceptr dst, CUdeviceptr src, std::uint64_t size) {
  auto copy = REAL(cuMemcpyDtoD_v2);
  if (copy == nullptr) return false;
  for (std::uint64_t done = 0; done < size; done += kMovePiece) {
    const std::uint64_t n = size - done < kMovePiece ? size - done : kMovePiece;
    if (copy(dst + done, src + done, n) != CUDA_SUCCESS) return false;
  }
  return true;
}

// One borrowed allocation: an address range this library reserved, backed by one physical handle
// on the device or in host memory. Its host memory is prepared ahead (the standby thread below):
// the driver allocates and pins every page of it at about 2 GB/s, which a move cannot wait for; a
// move is then a copy into it and a remap. It stays after a move back, for the next one.
struct Borrowed {
  std::uint64_t size = 0;  // of the range and the handles (granular)
  CUcontext context = nullptr;
  int device = -1;  // CUDA ordinal
  int ledger_dev = -1;
  CUmemGenericAllocationHandle handle = 0;  // what backs the range now (`host` while on_host)
  bool on_host = false;
  CUmemGenericAllocationHandle host = 0;  // its host memory, 0 until prepared
  CUdeviceptr host_view = 0;              // where `host` is mapped too: a move copies through it
  bool preparing = false;                 // the standby thread is creating `host`
  bool host_failed = false;               // the driver refused it: not tried again in the background
};

// The table of borrowed allocations and every move: one lock, never taken on a launch, nor by a
// process that never borrowed.
std::mutex* g_lock = new std::mutex;
// A vector searched linearly: borrowed allocations are few (large blocks of a caching allocator),
// and the injected library links no tree of the C++ runtime.
using Table = std::vector<std::pair<CUdeviceptr, Borrowed>>;
Table* g_table = new Table;

Table::iterator find_borrowed(CUdeviceptr ptr) {
  return std::find_if(g_table->begin(), g_table->end(), [ptr](const auto& e) { return e.first == ptr; });
}
std::atomic<std::uint64_t> g_movable[kRecords] = {};  // borrowed bytes on the device, per record
std::atomic<std::uint64_t> g_on_host[kRecords] = {};  // borrowed bytes in host memory, per record
std::atomic<std::uint64_t> g_wanted[kRecords] = {};   // bytes this process's waiting allocations need
std::atomic<std::uint32_t> g_within[kRecords] = {};   // waiting allocations within the guarantee

// The hold of submissions during a move.
std::atomic<bool> g_hold{false};
std::atomic<std::int64_t> g_submitting{0};

// The board of each device record, opened on first use.
std::atomic<Board*> g_boards[kRecords] = {};
std::atomic<std::uint64_t> g_board_retry_ns[kRecords] = {};
std::atomic<bool> g_board_opening[kRecords] = {};  // a thread is in Board::open for the device
std::uint64_t g_last_asker_ns[kRecords] = {};      // reclaim thread only
// The level this process holds its borrowed memory at, capped by the operator's assignment: set by
// the watcher, which alone reads the assignment, for the reclaim thread (low until then).
std::atomic<std::uint32_t> g_capped_level[kRecords] = {};

void sleep_us(long us) {
  timespec ts{0, us * 1000};
  nanosleep(&ts, nullptr);
}

std::uint64_t granularity() {
  static std::atomic<std::uint64_t> cached{0};
  std::uint64_t g = cached.load(std::memory_order_relaxed);
  if (g != 0) return g;
  g = 2ULL << 20;
  static auto fn = REAL_UNHOOKED(Cuda, cuMemGetAllocationGranularity);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  std::size_t got = 0;
  if (fn != nullptr && fn(&got, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS && got != 0 &&
      (got & (got - 1)) == 0)
    g = got > g ? got : g;
  cached.store(g, std::memory_order_relaxed);
  return g;
}

std::uint64_t round_up(std::uint64_t bytes, std::uint64_t g) {
  return bytes > ~0ULL - (g - 1) ? bytes : (bytes + g - 1) & ~(g - 1);
}

CUmemAllocationProp prop_on(bool host, int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location =
      host ? CUmemLocation{CU_MEM_LOCATION_TYPE_HOST, 0} : CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, device};
  return prop;
}

// The driver's functions, never our hooks: these are not the application's allocations.
struct Vmm {
  decltype(&::cuMemAddressReserve) reserve = REAL_UNHOOKED(Cuda, cuMemAddressReserve);
  decltype(&::cuMemAddressFree) address_free = REAL_UNHOOKED(Cuda, cuMemAddressFree);
  decltype(&::cuMemMap) map = REAL_UNHOOKED(Cuda, cuMemMap);
  decltype(&::cuMemUnmap) unmap = REAL_UNHOOKED(Cuda, cuMemUnmap);
  decltype(&::cuMemSetAccess) set_access = REAL_UNHOOKED(Cuda, cuMemSetAccess);
  decltype(&::cuCtxGetCurrent) get_current = REAL_UNHOOKED(Cuda, cuCtxGetCurrent);
  decltype(&::cuCtxSetCurrent) set_current = REAL_UNHOOKED(Cuda, cuCtxSetCurrent);
  bool ok() const {
    return reserve != nullptr && address_free != nullptr && map != nullptr && unmap != nullptr &&
           set_access != nullptr && get_current != nullptr && set_current != nullptr;
  }
};

const Vmm& vmm() {
  static const Vmm* ops = new (std::nothrow) Vmm();
  return *ops;
}

CUresult create(CUmemGenericAllocationHandle* handle, std::uint64_t size, bool host, int device) {
  auto fn = REAL(cuMemCreate);
  if (fn == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  const CUmemAllocationProp prop = prop_on(host, device);
  return fn(handle, size, &prop, 0);
}

CUresult release_handle(CUmemGenericAllocationHandle handle) {
  auto fn = REAL(cuMemRelease);
  return fn == nullptr ? CUDA_ERROR_NOT_SUPPORTED : fn(handle);
}

CUresult map_with_access(CUdeviceptr at, std::uint64_t size, CUmemGenericAllocationHandle handle,
                         int device) {
  const Vmm& ops = vmm();
  CUresult r = ops.map(at, size, 0, handle, 0);
  if (r != CUDA_SUCCESS) return r;
  CUmemAccessDesc access{};
  access.location = {CU_MEM_LOCATION_TYPE_DEVICE, device};
  access.flags = 0x3;  // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
  r = ops.set_access(at, size, &access, 1);
  if (r != CUDA_SUCCESS) ops.unmap(at, size);
  return r;
}

void publish_figures(int ledger_dev) {
  shm::Ledger* l = ledger();
  if (l == nullptr || ledger_dev < 0 || ledger_dev >= kRecords) return;
  l->set_reclaim_figures(ledger_dev, g_movable[ledger_dev].load(), g_on_host[ledger_dev].load());
}

// Host memory for `size` bytes of device `device`, mapped at its own range (*view) where the device
// can read and write it. Any current context. On failure nothing is left behind.
CUresult prepare_host(std::uint64_t size, int device, CUmemGenericAllocationHandle* host, CUdeviceptr* view) {
  const Vmm& ops = vmm();
  CUresult r = create(host, size, true, device);
  if (r != CUDA_SUCCESS) return r;
  r = ops.reserve(view, size, 0, 0, 0);
  if (r == CUDA_SUCCESS) {
    r = map_with_access(*view, size, *host, device);
    if (r == CUDA_SUCCESS) return r;
    ops.address_free(*view, size);
  }
  release_handle(*host);
  *host = 0;
  *view = 0;
  return r;
}

void drop_host(CUmemGenericAllocationHandle host, CUdeviceptr view, std::uint64_t size) {
  if (view != 0) {
    vmm().unmap(view, size);
    vmm().address_free(view, size);
  }
  if (host != 0) release_handle(host);
}

// Maps `fresh` at `at` in place of what backs it now; on failure the old backing is mapped back
// (its contents untouched) and false is returned.
bool remap(CUdeviceptr at, const Borrowed& b, CUmemGenericAllocationHandle fresh) {
  if (vmm().unmap(at, b.size) != CUDA_SUCCESS) return false;
  if (map_with_access(at, b.size, fresh, b.device) == CUDA_SUCCESS) return true;
  (void)map_with_access(at, b.size, b.handle, b.device);
  return false;
}

void log_move(const Borrowed& b, bool to_host, bool prepared, std::uint64_t t0, std::uint64_t t1,
              std::uint64_t t2) {
  GS_LOG(Debug, "reclaim: %.1f MiB to %s: %s %.1f ms, copy %.1f ms, remap %.1f ms",
         static_cast<double>(b.size) / (1 << 20), to_host ? "host" : "device",
         prepared ? "host memory prepared ahead, create" : "create", static_cast<double>(t1 - t0) / 1e6,
         static_cast<double>(t2 - t1) / 1e6, static_cast<double>(monotonic_ns() - t2) / 1e6);
}

// Re-backs `b` at `at` by its host memory (prepared ahead, or created now): the contents copied
// through its view, the device memory unmapped and released. On any failure the allocation stays
// on the device as it was. The caller holds g_lock and the submissions, with b.context current.
bool rebind_to_host(CUdeviceptr at, Borrowed& b) {
  const std::uint64_t t0 = monotonic_ns();
  const bool prepared = b.host != 0;
  if (!prepared && prepare_host(b.size, b.device, &b.host, &b.host_view) != CUDA_SUCCESS) return false;
  const std::uint64_t t1 = monotonic_ns();
  if (!copy_in_pieces(b.host_view, at, b.size)) return false;  // the host memory stays prepared
  const std::uint64_t t2 = monotonic_ns();
  if (!remap(at, b, b.host)) return false;
  release_handle(b.handle);
  b.handle = b.host;
  b.on_host = true;
  log_move(b, true, prepared, t0, t1, t2);
  return true;
}

// Re-backs `b` at `at` by new device memory: mapped at a staging range, the contents copied, then
// mapped at `at`. The host memory stays, prepared for the next move. On any failure the allocation
// stays in host memory as it was. The caller holds g_lock and the submissions, b.context current.
bool rebind_to_device(CUdeviceptr at, Borrowed& b) {
  const Vmm& ops = vmm();
  const std::uint64_t t0 = monotonic_ns();
  CUmemGenericAllocationHandle fresh = 0;
  if (create(&fresh, b.size, false, b.device) != CUDA_SUCCESS) return false;
  const std::uint64_t t1 = monotonic_ns();
  CUdeviceptr staging = 0;
  if (ops.reserve(&staging, b.size, 0, 0, 0) != CUDA_SUCCESS) {
    release_handle(fresh);
    return false;
  }
  const bool mapped = map_with_access(staging, b.size, fresh, b.device) == CUDA_SUCCESS;
  const bool copied = mapped && copy_in_pieces(staging, at, b.size);
  const std::uint64_t t2 = monotonic_ns();
  if (mapped) ops.unmap(staging, b.size);
  ops.address_free(staging, b.size);
  if (!copied || !remap(at, b, fresh)) {
    release_handle(fresh);
    return false;
  }
  b.handle = fresh;
  b.on_host = false;
  log_move(b, false, false, t0, t1, t2);
  return true;
}

// Holds the submissions of this process and drains the contexts `contexts`: false when a
// submission did not finish within `budget_ns` (the hold is then lifted).
bool hold_and_drain(const std::vector<CUcontext>& contexts, std::uint64_t budget_ns) {
  g_hold.store(true, std::memory_order_seq_cst);
  const std::uint64_t until = monotonic_ns() + budget_ns;
  while (g_submitting.load(std::memory_order_seq_cst) != 0) {
    if (monotonic_ns() > until) {
      g_hold.store(false, std::memory_order_seq_cst);
      return false;
    }
    sleep_us(50);
  }
  auto sync = REAL(cuCtxSynchronize);
  for (CUcontext c : contexts) {
    if (vmm().set_current(c) == CUDA_SUCCESS && sync != nullptr) (void)sync();
  }
  return true;
}

void release_hold() { g_hold.store(false, std::memory_order_seq_cst); }

Board* board_of(DeviceState& d) {
  const int dev = d.ledger_dev.load(std::memory_order_relaxed);
  if (dev < 0 || dev >= kRecords) return nullptr;
  Board* b = g_boards[dev].load(std::memory_order_acquire);
  if (b != nullptr) return b;
  Runtime* rt = runtime();
  if (rt == nullptr || rt->container_key == 0) return nullptr;
  const std::uint64_t now = monotonic_ns();
  if (now < g_board_retry_ns[dev].load(std::memory_order_relaxed)) return nullptr;  // failed lately
  bool idle = false;
  if (!g_board_opening[dev].compare_exchange_strong(idle, true, std::memory_order_acq_rel)) {
    // Another thread is opening it at this instant (the watcher's tick beside an allocation that
    // asks): wait for its result rather than take "no board" for an answer.
    const std::uint64_t until = now + 1'000'000'000ULL;
    while (g_board_opening[dev].load(std::memory_order_acquire) && monotonic_ns() < until) sleep_us(100);
    return g_boards[dev].load(std::memory_order_acquire);
  }
  struct Opening {
    std::atomic<bool>& flag;
    ~Opening() { flag.store(false, std::memory_order_release); }
  } opening{g_board_opening[dev]};
  if (Board* done = g_boards[dev].load(std::memory_order_acquire)) return done;  // opened meanwhile
  g_board_retry_ns[dev].store(now + 1'000'000'000ULL, std::memory_order_relaxed);
  std::unique_ptr<Board> opened =
      Board::open(rt->settings.node_dir, rt->settings.node_writer, d.uuid, rt->container_key);
  if (!opened) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
      GS_LOG(Warn,
             "reclaim: cannot use the node directory %s: borrowed memory cannot be asked for or given back",
             rt->settings.node_dir.c_str());
    return nullptr;
  }
  Board* fresh = opened.release();
  Board* expected = nullptr;
  if (!g_boards[dev].compare_exchange_strong(expected, fresh)) {
    delete fresh;
    return expected;
  }
  return fresh;
}

// The level the container asks for (normal when none). The watcher caps it by the operator's
// assignment, which only the watcher reads; readers of the board cap what a record claims anyway.
Priority own_level(const DeviceState& d, bool watcher) {
  shm::Ledger* l = ledger();
  const std::optional<Priority> asked = l != nullptr ? l->priority() : std::nullopt;
  const Priority level = asked.value_or(Priority::Normal);
  if (!watcher) return level;
  const shm::Assignment assigned = node_presence::assignment_for(d.uuid);
  if (assigned.state == shm::Assignment::State::Refused) return Priority::Low;
  return lower_priority(
      level, assigned.state == shm::Assignment::State::Believed ? assigned.priority : Priority::Normal);
}

std::uint64_t above_guarantee_now(int dev) {
  shm::Ledger* l = ledger();
  if (l == nullptr) return 0;
  const std::uint64_t g = l->guarantee(dev);
  const std::uint64_t used = l->used(dev);
  return g != 0 && used > g ? used - g : 0;
}

// The level the reclaim thread publishes and decides by (the watcher's last word).
Priority capped_level(int dev) {
  return priority_from_value(g_capped_level[dev].load(std::memory_order_relaxed)).value_or(Priority::Low);
}

void publish_own(DeviceState& d, Board& board, bool watcher) {
  const int dev = d.ledger_dev.load(std::memory_order_relaxed);
  BoardEntry own;
  own.priority = watcher ? capped_level(dev) : own_level(d, false);
  own.above_guarantee = above_guarantee_now(dev);
  own.movable = g_movable[dev].load();
  own.on_host = g_on_host[dev].load();
  own.wanted = g_wanted[dev].load();
  own.within_guarantee = g_within[dev].load() != 0;
  board.publish(own);
}

// The device's free memory as the driver sees it (any context of ours on it made current).
bool device_free(CUcontext context, std::uint64_t* free_bytes) {
  auto info = REAL(cuMemGetInfo_v2);
  if (info == nullptr || vmm().set_current(context) != CUDA_SUCCESS) return false;
  std::size_t free = 0, total = 0;
  if (info(&free, &total) != CUDA_SUCCESS) return false;
  *free_bytes = free;
  return true;
}

// The borrowed allocations of record `dev` on the device (or in host memory), largest first.
// Under g_lock.
using Picked = std::vector<std::pair<CUdeviceptr, Borrowed*>>;
Picked largest_first(int dev, bool on_host) {
  Picked picked;
  for (auto& [ptr, b] : *g_table)
    if (b.ledger_dev == dev && b.on_host == on_host) picked.emplace_back(ptr, &b);
  std::sort(picked.begin(), picked.end(),
            [](const auto& a, const auto& b) { return a.second->size > b.second->size; });
  return picked;
}

// The contexts the picked allocations were made in, each once: what a move drains.
std::vector<CUcontext> contexts_of(const Picked& picked) {
  std::vector<CUcontext> contexts;
  for (const auto& p : picked)
    if (std::find(contexts.begin(), contexts.end(), p.second->context) == contexts.end())
      contexts.push_back(p.second->context);
  return contexts;
}

// A board record as the plan sees it: what its allocations wait for, and what it holds.
Asker asker_of(const BoardEntry& e) {
  return Asker{e.container_key, e.priority, e.within_guarantee, e.wanted};
}

Holder holder_of(const BoardEntry& e) {
  return Holder{e.container_key, e.pid, e.priority, e.above_guarantee, e.movable};
}

// Whether one of the records read from the board waits for memory it may ask `self` for.
bool asked_by_any(const BoardEntry* entries, std::size_t n, const Holder& self) {
  for (std::size_t i = 0; i < n; ++i)
    if (may_ask(asker_of(entries[i]), self)) return true;
  return false;
}

bool still_asked(const Holder& self, const Board& board) {
  constexpr std::size_t kCapacity = 256;
  static BoardEntry others[kCapacity];  // the reclaim thread's
  return asked_by_any(others, board.read(others, kCapacity, monotonic_ns()), self);
}

// After a move the borrower stays held until the asker has its allocation (at most this long): its
// work resuming would compete with the asker's first requests, which the reclaim is for.
constexpr std::uint64_t kHoldForAskerNs = 100'000'000ULL;

// Moves at least `want` bytes of this process's borrowed memory on record `dev` to host memory,
// largest allocations first. Returns the bytes moved.
std::uint64_t move_to_host(int dev, std::uint64_t want, const Holder& self, const Board& board) {
  std::lock_guard<std::mutex> lock(*g_lock);
  Picked picked = largest_first(dev, /*on_host=*/false);
  std::uint64_t sum = 0;
  std::size_t n = 0;
  while (n < picked.size() && sum < want) sum += picked[n++].second->size;
  picked.resize(n);
  if (picked.empty()) return 0;
  const std::vector<CUcontext> contexts = contexts_of(picked);
  CUcontext previous = nullptr;
  vmm().get_current(&previous);
  const std::uint64_t started = monotonic_ns();
  std::uint64_t moved = 0;
  if (hold_and_drain(contexts, deadline_ns())) {
    GS_LOG(Debug, "reclaim: submissions held and drained in %.1f ms",
           static_cast<double>(monotonic_ns() - started) / 1e6);
    for (auto& [ptr, b] : picked) {
      AllocationInFlight flight;  // the footprint reconciliation waits while the books move
      vmm().set_current(b->context);
      if (!rebind_to_host(ptr, *b)) continue;
      ledger()->release(dev, b->size);
      g_movable[dev].fetch_sub(b->size);
      g_on_host[dev].fetch_add(b->size);
      moved += b->size;
      publish_figures(dev);  // progress, allocation by allocation
    }
    const std::uint64_t until = monotonic_ns() + kHoldForAskerNs;
    while (moved != 0 && monotonic_ns() < until && still_asked(self, board)) sleep_us(2000);
    release_hold();
  }
  vmm().set_current(previous);
  const std::uint64_t took = monotonic_ns() - started;
  publish_figures(dev);
  if (moved != 0) {
    ledger()->add_reclaim_episode(dev, took, moved);
    GS_LOG(Info, "reclaim: moved %.1f MiB of borrowed memory to host memory in %.1f ms (asked for %.1f MiB)",
           static_cast<double>(moved) / (1 << 20), static_cast<double>(took) / 1e6,
           static_cast<double>(want) / (1 << 20));
  }
  return moved;
}

// Moves host-backed allocations of record `dev` back to the device while it has `room` bytes free
// beyond the margin, largest first. Returns the bytes moved.
std::uint64_t restore(int dev, std::uint64_t room) {
  std::lock_guard<std::mutex> lock(*g_lock);
  Picked fits;
  std::uint64_t sum = 0;
  for (auto& p : largest_first(dev, /*on_host=*/true)) {
    if (sum + p.second->size > room) continue;
    sum += p.second->size;
    fits.push_back(p);
  }
  if (fits.empty()) return 0;
  const std::vector<CUcontext> contexts = contexts_of(fits);
  CUcontext previous = nullptr;
  vmm().get_current(&previous);
  const std::uint64_t started = monotonic_ns();
  std::uint64_t moved = 0;
  if (hold_and_drain(contexts, deadline_ns())) {
    for (auto& [ptr, b] : fits) {
      AllocationInFlight flight;
      if (!ledger()->try_reserve(dev, b->size)) continue;  // the quota no longer has room
      vmm().set_current(b->context);
      if (!rebind_to_device(ptr, *b)) {
        ledger()->release(dev, b->size);
        continue;
      }
      g_on_host[dev].fetch_sub(b->size);
      g_movable[dev].fetch_add(b->size);
      moved += b->size;
      publish_figures(dev);
    }
    release_hold();
  }
  vmm().set_current(previous);
  publish_figures(dev);
  if (moved != 0)
    GS_LOG(Info, "reclaim: moved %.1f MiB of borrowed memory back to the device in %.1f ms",
           static_cast<double>(moved) / (1 << 20), static_cast<double>(monotonic_ns() - started) / 1e6);
  return moved;
}

void* reclaim_main(void*);

// The reclaim's threads: not started, being started (by the first borrowed allocation), running,
// or failed to start (then nothing is lent: it could not be given back).
enum class Threads : int { NotStarted, Starting, Running, Failed };
std::atomic<Threads> g_threads{Threads::NotStarted};

// Marks the first borrowed allocation on the device without host memory (nor one being made) as
// being prepared and copies it to *picked; also sums what is prepared and what is not. Under g_lock.
bool pick_unprepared(CUdeviceptr* ptr, Borrowed* picked, std::uint64_t* unprepared, std::uint64_t* prepared) {
  std::lock_guard<std::mutex> lock(*g_lock);
  *ptr = 0;
  *unprepared = 0;
  *prepared = 0;
  for (auto& [at, b] : *g_table) {
    if (b.host != 0) *prepared += b.size;
    if (b.on_host || b.host != 0 || b.host_failed) continue;
    *unprepared += b.size;
    if (*ptr == 0 && !b.preparing) {
      b.preparing = true;
      *ptr = at;
      *picked = b;
    }
  }
  return *ptr != 0;
}

// The standby thread: prepares the host memory of each borrowed allocation that is on the device
// and has none yet, one at a time, outside g_lock (pinning takes about a second per 2 GiB).
void* standby_main(void*) {
  bool all_said = true;
  for (;;) {
    sleep_us(20'000);
    CUdeviceptr ptr = 0;
    Borrowed b;
    std::uint64_t unprepared = 0, prepared = 0;
    if (!pick_unprepared(&ptr, &b, &unprepared, &prepared)) {
      if (!all_said && unprepared == 0) {
        GS_LOG(Debug, "reclaim: host memory prepared ahead for all %.1f MiB borrowed",
               static_cast<double>(prepared) / (1 << 20));
        all_said = true;
      }
      sleep_us(80'000);
      continue;
    }
    all_said = false;
    CUmemGenericAllocationHandle host = 0;
    CUdeviceptr view = 0;
    const std::uint64_t t0 = monotonic_ns();
    const CUresult r = vmm().set_current(b.context) == CUDA_SUCCESS
                           ? prepare_host(b.size, b.device, &host, &view)
                           : CUDA_ERROR_INVALID_CONTEXT;
    bool kept = false;
    {
      std::lock_guard<std::mutex> lock(*g_lock);
      auto found = find_borrowed(ptr);
      // Still the same allocation (freed and another made at the address: not marked preparing).
      if (found != g_table->end() && found->second.preparing) {
        Borrowed& now = found->second;
        now.preparing = false;
        if (r != CUDA_SUCCESS) {
          now.host_failed = true;
        } else if (now.host == 0 && now.size == b.size) {
          now.host = host;
          now.host_view = view;
          kept = true;
        }
      }
    }
    if (r == CUDA_SUCCESS && !kept) drop_host(host, view, b.size);  // a move made its own, or it is gone
    if (r != CUDA_SUCCESS) {
      static std::atomic<bool> said{false};
      if (!said.exchange(true))
        GS_LOG(Warn,
               "reclaim: host memory for %.1f MiB of borrowed memory could not be prepared (error %d): a "
               "move will create it then, slowly",
               static_cast<double>(b.size) / (1 << 20), static_cast<int>(r));
    } else {
      GS_LOG(Debug, "reclaim: host memory for %.1f MiB of borrowed memory prepared in %.1f ms",
             static_cast<double>(b.size) / (1 << 20), static_cast<double>(monotonic_ns() - t0) / 1e6);
    }
  }
  return nullptr;
}

CUcontext any_context(int dev) {
  std::lock_guard<std::mutex> lock(*g_lock);
  for (auto& [ptr, b] : *g_table)
    if (b.ledger_dev == dev) return b.context;
  return nullptr;
}

// The threads start with the first borrowed allocation (a concurrent one waits for them); without
// the reclaim thread nothing could be given back, so nothing is lent.
bool reclaim_threads_running() {
  Threads state = Threads::NotStarted;
  if (g_threads.compare_exchange_strong(state, Threads::Starting)) {
    const bool started = start_background_thread(reclaim_main);
    if (!started)
      GS_LOG(Warn, "reclaim: cannot start the reclaim thread: nothing is lent above the guarantee");
    if (started && !start_background_thread(standby_main))
      GS_LOG(Warn, "reclaim: no thread to prepare host memory ahead: a move will create it then, slowly");
    g_threads.store(started ? Threads::Running : Threads::Failed);
    return started;
  }
  while ((state = g_threads.load()) == Threads::Starting) sleep_us(100);
  return state == Threads::Running;
}

// Borrowed memory on the device without host memory yet: what its moves would still have to pin.
std::uint64_t unprepared_bytes() {
  std::lock_guard<std::mutex> lock(*g_lock);
  std::uint64_t sum = 0;
  for (const auto& [ptr, b] : *g_table)
    if (!b.on_host && b.host == 0) sum += b.size;
  return sum;
}

// Whether the host (and the container's memory cgroup) can pin `size` more bytes beside what the
// borrowed memory already needs: a borrow that could not be given back is refused like a quota's.
bool host_can_back(DeviceState* d, std::uint64_t size) {
  const std::optional<std::uint64_t> room = host_room_bytes();
  const std::uint64_t need = unprepared_bytes() + size;
  if (host_room_allows(need, room)) return true;
  static std::atomic<bool> said{false};
  if (!said.exchange(true, std::memory_order_relaxed))
    GS_LOG(
        Warn,
        "device %d: borrowing %.1f MiB above the memory guarantee needs as much pinned host memory to give "
        "it back, and the host or the container's memory limit has %.1f MiB left (%.0f MiB kept for the "
        "process): refused with CUDA_ERROR_OUT_OF_MEMORY",
        d->index, static_cast<double>(size) / (1 << 20), static_cast<double>(room.value_or(0)) / (1 << 20),
        static_cast<double>(kHostMarginBytes) / (1 << 20));
  const int dev = d->ledger_dev.load(std::memory_order_relaxed);
  if (ledger() != nullptr && dev >= 0) ledger()->count_refusal(dev);
  return false;
}

}  // namespace

bool above_guarantee(const DeviceState* d, std::uint64_t bytes) {
  if (d == nullptr) return false;
  const int dev = d->ledger_dev.load(std::memory_order_relaxed);
  shm::Ledger* l = ledger();
  if (dev < 0 || l == nullptr) return false;
  const std::uint64_t g = l->guarantee(dev);
  return g != 0 && l->used(dev) + bytes > g;
}

CUresult allocate_borrowed(DeviceState* d, std::uint64_t bytes, CUdeviceptr* dptr) {
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (!reclaim_threads_running()) return CUDA_ERROR_OUT_OF_MEMORY;
  const std::uint64_t size = round_up(bytes, granularity());
  if (!host_can_back(d, size)) return CUDA_ERROR_OUT_OF_MEMORY;
  const Vmm& ops = vmm();
  if (!ops.ok()) return CUDA_ERROR_NOT_SUPPORTED;
  AllocationInFlight flight;
  Reservation r = reserve(d, size);
  if (r.refused) return CUDA_ERROR_OUT_OF_MEMORY;
  CUcontext context = nullptr;
  if (ops.get_current(&context) != CUDA_SUCCESS || context == nullptr) {
    settle(r, CUDA_ERROR_INVALID_CONTEXT, AllocKind::Linear, 0);
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  CUdeviceptr range = 0;
  CUresult res = ops.reserve(&range, size, 0, 0, 0);
  CUmemGenericAllocationHandle handle = 0;
  if (res == CUDA_SUCCESS) {
    res = create(&handle, size, false, d->index);
    if (res == CUDA_SUCCESS) {
      res = map_with_access(range, size, handle, d->index);
      if (res != CUDA_SUCCESS) release_handle(handle);
    }
    if (res != CUDA_SUCCESS) ops.address_free(range, size);
  }
  if (res != CUDA_SUCCESS) {
    // The driver's out-of-memory is cuMemAlloc's; anything else it cannot do is too.
    settle(r, res, AllocKind::Linear, 0);
    return res == CUDA_ERROR_OUT_OF_MEMORY ? res : CUDA_ERROR_OUT_OF_MEMORY;
  }
  const int dev = r.ledger_dev;
  {
    std::lock_guard<std::mutex> lock(*g_lock);
    g_table->emplace_back(range, Borrowed{size, context, d->index, dev, handle, false});
  }
  if (dev >= 0 && dev < kRecords) g_movable[dev].fetch_add(size);
  if (!g_borrower.load(std::memory_order_relaxed)) {
    g_borrower.store(true, std::memory_order_seq_cst);
    launch_flag::turn_on();  // the launch hooks reach the gate, which counts them
  }

  publish_figures(dev);
  *dptr = range;
  return CUDA_SUCCESS;
}

bool free_borrowed(CUdeviceptr ptr, CUresult* result) {
  if (!g_borrower.load(std::memory_order_acquire)) return false;
  AllocationInFlight flight;
  std::lock_guard<std::mutex> lock(*g_lock);
  auto found = find_borrowed(ptr);
  if (found == g_table->end()) return false;
  Borrowed b = found->second;
  const Vmm& ops = vmm();
  // cuMemFree waits for the device's work on the memory: so does this.
  CUcontext previous = nullptr;
  ops.get_current(&previous);
  if (ops.set_current(b.context) == CUDA_SUCCESS) {
    if (auto sync = REAL(cuCtxSynchronize)) (void)sync();
  }
  ops.set_current(previous);
  CUresult r = ops.unmap(ptr, b.size);
  if (r != CUDA_SUCCESS) {
    *result = r;
    return true;
  }
  if (!b.on_host) release_handle(b.handle);
  drop_host(b.host, b.host_view, b.size);  // while on host, b.handle is this one
  ops.address_free(ptr, b.size);
  g_table->erase(found);
  const int dev = b.ledger_dev;
  if (dev >= 0 && dev < kRecords) {
    if (b.on_host) {
      g_on_host[dev].fetch_sub(b.size);
    } else {
      g_movable[dev].fetch_sub(b.size);
      ledger()->release(dev, b.size);
    }
  }
  publish_figures(dev);
  *result = CUDA_SUCCESS;
  return true;
}

bool refuse_unmovable(DeviceState* d, std::uint64_t bytes) {
  if (!above_guarantee(d, bytes)) return false;
  static std::atomic<bool> said{false};
  if (!said.exchange(true, std::memory_order_relaxed))
    GS_LOG(
        Warn,
        "device %d: an allocation of %.1f MiB that cannot be moved to host memory (pitched, managed, "
        "stream-ordered, an array, or the application's own virtual memory) would take the container above "
        "its memory guarantee of %.1f MiB: refused (only cuMemAlloc memory is lent above the guarantee)",
        d->index, static_cast<double>(bytes) / (1 << 20),
        static_cast<double>(ledger()->guarantee(d->ledger_dev)) / (1 << 20));
  ledger()->count_refusal(d->ledger_dev);  // counted; the line above says why (not the quota)
  return true;
}

bool enter_submission_slow() {
  for (;;) {
    g_submitting.fetch_add(1, std::memory_order_seq_cst);
    if (!g_hold.load(std::memory_order_seq_cst)) return true;
    g_submitting.fetch_sub(1, std::memory_order_seq_cst);
    while (g_hold.load(std::memory_order_seq_cst)) sleep_us(50);
  }
}

void leave_submission() { g_submitting.fetch_sub(1, std::memory_order_seq_cst); }

// GPUSLICE_RECLAIM_DEADLINE, read with the rest of the configuration (a malformed value fails the
// start like any other).
std::uint64_t deadline_ns() { return settings().reclaim_deadline_ns; }

bool asking_possible(const DeviceState* d) {
  if (d == nullptr || !memory_active()) return false;
  const int dev = d->ledger_dev.load(std::memory_order_relaxed);
  shm::Ledger* l = ledger();
  if (dev < 0 || dev >= kRecords || l == nullptr) return false;
  return l->guarantee(dev) != 0 || l->priority().has_value();
}

Ask::Ask(DeviceState* d, std::uint64_t bytes) : device_(d), bytes_(bytes) {
  if (!asking_possible(d)) return;
  const int dev = d->ledger_dev.load(std::memory_order_relaxed);
  shm::Ledger* l = ledger();
  const std::uint64_t g = l->guarantee(dev);
  // The reservation of this allocation is already in the books.
  const bool within = g != 0 && l->used(dev) <= g;
  const Priority level = own_level(*d, false);
  if (!within && level == Priority::Low) return;
  Board* board = board_of(*d);
  if (board == nullptr) {
    GS_LOG(Debug, "device %d: no reclaim board here: the allocation does not wait", d->index);
    return;
  }
  // Someone this allocation may ask must hold borrowed memory on the device.
  constexpr std::size_t kCapacity = 256;
  std::vector<BoardEntry> others(kCapacity);
  const std::uint64_t now = monotonic_ns();
  const std::size_t n = board->read(others.data(), kCapacity, now);
  Asker me{runtime()->container_key, level, within, bytes};
  bool someone = false;
  for (std::size_t i = 0; i < n && !someone; ++i)
    someone = others[i].movable != 0 && may_ask(me, holder_of(others[i]));
  if (!someone) {
    GS_LOG(Debug, "device %d: no borrower this allocation may ask holds movable memory (%zu records read)",
           d->index, n);
    return;
  }
  active_ = true;
  started_ns_ = now;
  deadline_ns_ = now + deadline_ns();
  g_wanted[dev].fetch_add(bytes);
  within_ = within;
  if (within) g_within[dev].fetch_add(1);
  publish_own(*d, *board, false);
  published_ns_ = now;
}

bool Ask::pause() {
  if (!active_) return false;
  const std::uint64_t now = monotonic_ns();
  if (now >= deadline_ns_) return false;
  if (now - published_ns_ > 200'000'000ULL) {
    if (Board* b = board_of(*device_)) publish_own(*device_, *b, false);
    published_ns_ = now;
  }
  sleep_us(2000);
  return true;
}

void Ask::finish(CUresult result) {
  if (!active_) return;
  const std::uint64_t took = monotonic_ns() - started_ns_;
  if (result == CUDA_ERROR_OUT_OF_MEMORY) {
    GS_LOG(Warn,
           "device %d: an allocation of %.1f MiB waited %.0f ms (GPUSLICE_RECLAIM_DEADLINE) for borrowed "
           "memory to "
           "be given back and the device still has no room: CUDA_ERROR_OUT_OF_MEMORY",
           device_->index, static_cast<double>(bytes_) / (1 << 20), static_cast<double>(took) / 1e6);
  } else {
    GS_LOG(Debug, "device %d: an allocation of %.1f MiB got its memory back from borrowers in %.1f ms",
           device_->index, static_cast<double>(bytes_) / (1 << 20), static_cast<double>(took) / 1e6);
  }
}

Ask::~Ask() {
  if (!active_) return;
  const int dev = device_->ledger_dev.load(std::memory_order_relaxed);
  g_wanted[dev].fetch_sub(bytes_);
  if (within_) g_within[dev].fetch_sub(1);
  if (Board* b = board_of(*device_)) publish_own(*device_, *b, false);
}

void tick() {
  if (!g_borrower.load(std::memory_order_acquire) || ledger() == nullptr) return;
  for_each_ready_device([](DeviceState& d) {
    const int dev = d.ledger_dev.load(std::memory_order_relaxed);
    if (dev >= 0 && dev < kRecords)
      g_capped_level[dev].store(priority_value(own_level(d, true)), std::memory_order_relaxed);
  });
}

namespace {

// The reclaim thread's round: publishes this process's borrowed memory, moves what the board asks
// for to host memory, and back when the device has room.
void step() {
  if (ledger() == nullptr) return;
  for_each_ready_device([](DeviceState& d) {
    const int dev = d.ledger_dev.load(std::memory_order_relaxed);
    if (dev < 0 || dev >= kRecords) return;
    if (g_movable[dev].load() == 0 && g_on_host[dev].load() == 0) return;
    Board* board = board_of(d);
    if (board == nullptr) return;
    publish_own(d, *board, true);
    constexpr std::size_t kCapacity = 256;
    static BoardEntry others[kCapacity];
    const std::uint64_t now = monotonic_ns();
    const std::size_t n = board->read(others, kCapacity, now);
    static Holder holders[kCapacity + 1];
    static Asker askers[kCapacity];
    std::size_t holder_count = 0, asker_count = 0;
    const std::uint64_t key = runtime()->container_key;
    holders[holder_count++] = Holder{key, static_cast<std::int32_t>(getpid()), capped_level(dev),
                                     above_guarantee_now(dev), g_movable[dev].load()};
    for (std::size_t i = 0; i < n; ++i) {
      const BoardEntry& e = others[i];
      if (e.movable != 0) holders[holder_count++] = holder_of(e);
      if (e.wanted != 0) askers[asker_count++] = asker_of(e);
    }
    const bool asked_of_us = asked_by_any(others, n, holders[0]);
    if (asked_of_us) g_last_asker_ns[dev] = now;
    const CUcontext context = any_context(dev);
    std::uint64_t free_bytes = 0;
    CUcontext previous = nullptr;
    vmm().get_current(&previous);
    const bool known = context != nullptr && device_free(context, &free_bytes);
    vmm().set_current(previous);
    if (!known) return;
    if (asked_of_us && g_movable[dev].load() != 0) {
      const std::uint64_t share = share_of(holders, holder_count, 0, askers, asker_count, free_bytes);
      if (share != 0 && move_to_host(dev, share, holders[0], *board) != 0) publish_own(d, *board, true);
      return;
    }
    if (g_on_host[dev].load() == 0 || now - g_last_asker_ns[dev] < kRestoreQuietNs) return;
    for (std::size_t a = 0; a < asker_count; ++a) {
      if (askers[a].wanted != 0) return;  // someone waits for memory: not the time to take it back
    }
    const std::uint64_t margin = d.physical_total / kRestoreMarginDivisor;
    if (free_bytes > margin && restore(dev, free_bytes - margin) != 0) publish_own(d, *board, true);
  });
}

// A round every 20 ms, not the watcher's 100: the asker waits for the first round that sees it,
// and the borrower runs beside the asker until it holds (on an H200 the watcher's tick was a tenth
// of the 0.6 s a 20 GiB reclaim took). Only a borrowing process runs it.
void* reclaim_main(void*) {
  for (;;) {
    sleep_us(20'000);
    step();
  }
  return nullptr;
}

}  // namespace

void after_fork() {
  // The parent's mappings are not the child's to move (CUDA is not usable in a fork child anyway).
  g_lock = new (std::nothrow) std::mutex;
  g_table = new (std::nothrow) Table;
  for (int i = 0; i < kRecords; ++i) {
    g_movable[i].store(0);
    g_on_host[i].store(0);
    g_wanted[i].store(0);
    g_within[i].store(0);
    delete g_boards[i].exchange(nullptr);  // the parent's record stays the parent's; a child opens its own
    g_board_retry_ns[i].store(0);
    g_board_opening[i].store(false);  // a parent's thread that was opening it is not here
  }
  g_hold.store(false);
  g_submitting.store(0);
  g_borrower.store(false);
  g_threads.store(Threads::NotStarted);  // the parent's threads are not here
}

void at_exit() {
  for (auto& board : g_boards) {
    if (Board* b = board.load(std::memory_order_acquire)) b->withdraw();
  }
}

}  // namespace gpuslice::interposer::reclaim
