#include "interposer/driver_reservations.h"

#include "common/log.h"
#include "interposer/core_driver.h"
#include "interposer/devices.h"
#include "interposer/module_image.h"

namespace gpuslice::interposer {

FunctionSlot g_function_slots[kFunctionSlots];
std::atomic<std::uint64_t> g_smallest_stack{kDefaultLimits[CU_LIMIT_STACK_SIZE]};

namespace {

// The slow paths (a limit set, a stack grown, a graph pool grown or trimmed) are rare and each
// reads, charges and writes several figures: one at a time. Re-entered by a refusal's trim.
std::atomic<bool> g_slow_lock{false};
thread_local bool t_slow_held = false;
class SlowPath {
 public:
  SlowPath() : owner_(!t_slow_held) {
    if (!owner_) return;
    while (g_slow_lock.exchange(true, std::memory_order_acquire)) {
    }
    t_slow_held = true;
  }
  ~SlowPath() {
    if (!owner_) return;
    t_slow_held = false;
    g_slow_lock.store(false, std::memory_order_release);
  }
  SlowPath(const SlowPath&) = delete;
  SlowPath& operator=(const SlowPath&) = delete;

 private:
  bool owner_;
};

// Larger than any GPU's resident threads today (B200: 148 x 2048): fails safe when unknown.
constexpr std::uint64_t kResidentThreadsBound = 512ULL * 2048;

void recompute_smallest_stack() {
  std::uint64_t smallest = kDefaultLimits[CU_LIMIT_STACK_SIZE];
  if (Runtime* rt = runtime()) {
    for (const DeviceState& d : rt->devices) {
      const std::uint64_t v = d.stack_per_thread.load(std::memory_order_relaxed);
      if (v < smallest) smallest = v;
    }
  }
  g_smallest_stack.store(smallest, std::memory_order_relaxed);
}

// Moves the charge of one limit to `wanted`: growth is reserved (false when refused), shrinking
// given back.
bool move_limit_charge(DeviceState& d, CUlimit limit, std::uint64_t wanted) {
  std::atomic<std::uint64_t>& charge = d.limit_charge[limit];
  const std::uint64_t now = charge.load(std::memory_order_relaxed);
  if (wanted > now) {
    if (reserve(&d, wanted - now).refused) return false;
  } else if (wanted < now) {
    ledger()->release(d.ledger_dev, now - wanted);
  }
  charge.store(wanted, std::memory_order_relaxed);
  return true;
}

std::uint64_t local_bytes_of(CUfunction f) {
  int bytes = 0;
  const auto query = core_driver().function_local_bytes;
  if (query == nullptr || query(f, &bytes) != CUDA_SUCCESS || bytes < 0) return 0;
  const auto local = static_cast<std::uint64_t>(bytes);
  const auto key = reinterpret_cast<std::uintptr_t>(f);
  const std::size_t home = function_hash(key);
  for (unsigned i = 0; i < kFunctionProbes; ++i) {
    FunctionSlot& slot = g_function_slots[(home + i) & (kFunctionSlots - 1)];
    std::uintptr_t expected = 0;
    if (slot.key.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
      slot.local.store(local, std::memory_order_relaxed);
      slot.key.store(key, std::memory_order_release);
      break;
    }
    if (expected == key) break;
  }
  return local;  // a full neighbourhood: asked again next time
}

// ---- graph needs: CUgraph / CUgraphExec -> device and bytes of allocation nodes ----
struct GraphSlot {
  std::atomic<std::uintptr_t> key{0};
  std::atomic<int> device{-1};
  std::atomic<std::uint64_t> bytes{0};
};
constexpr std::size_t kGraphSlots = 4096;
constexpr unsigned kGraphProbes = 8;
GraphSlot g_graph_slots[kGraphSlots];

GraphSlot* graph_slot(const void* handle, bool create) {
  const auto key = reinterpret_cast<std::uintptr_t>(handle);
  if (key <= 1) return nullptr;
  const std::size_t home = function_hash(key);
  for (unsigned i = 0; i < kGraphProbes; ++i) {
    GraphSlot& slot = g_graph_slots[(home + i) & (kGraphSlots - 1)];
    std::uintptr_t k = slot.key.load(std::memory_order_acquire);
    if (k == key) return &slot;
    if (k != 0) continue;
    if (!create) return nullptr;  // slots are never emptied: the handle is not further on
    if (slot.key.compare_exchange_strong(k, key, std::memory_order_acq_rel)) return &slot;
    if (k == key) return &slot;
  }
  return nullptr;
}

std::uint64_t graph_figure(const DeviceState& d, CUgraphMem_attribute attr, std::uint64_t fallback) {
  std::uint64_t value = 0;
  const auto read = core_driver().graph_mem_attribute;
  if (read == nullptr || read(d.index, attr, &value) != CUDA_SUCCESS) return fallback;
  return value;
}

}  // namespace

std::uint64_t limit_reservation(CUlimit limit, std::uint64_t value, std::uint64_t threads) {
  const auto index = static_cast<unsigned>(limit);
  if (index >= 5 || value <= kDefaultLimits[index]) return 0;
  const std::uint64_t extra = value - kDefaultLimits[index];
  std::uint64_t bytes = 0;
  switch (limit) {
    case CU_LIMIT_STACK_SIZE:
      return __builtin_mul_overflow(extra, threads, &bytes) ? ~0ULL : bytes;
    case CU_LIMIT_PRINTF_FIFO_SIZE:
    case CU_LIMIT_MALLOC_HEAP_SIZE:
      return extra;
    case CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT:
      return __builtin_mul_overflow(extra, kPendingLaunchBytes, &bytes) ? ~0ULL : bytes;
    case CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH:
      break;
  }
  return 0;
}

std::uint64_t resident_threads(DeviceState& d) {
  std::uint64_t known = d.resident_threads.load(std::memory_order_relaxed);
  if (known != 0) return known;
  int sms = 0, per_sm = 0;
  const auto attr = core_driver().device_attribute;
  if (attr != nullptr && attr(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d.index) == CUDA_SUCCESS &&
      attr(&per_sm, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, d.index) == CUDA_SUCCESS && sms > 0 &&
      per_sm > 0) {
    known = static_cast<std::uint64_t>(sms) * static_cast<std::uint64_t>(per_sm);
  } else {
    known = kResidentThreadsBound;
  }
  d.resident_threads.store(known, std::memory_order_relaxed);
  return known;
}

CUresult set_limit_charged(CUlimit limit, std::uint64_t value, CUresult (*set)(CUlimit, size_t)) {
  DeviceState* d = current_device_state();
  if (d == nullptr || d->ledger_dev < 0 || static_cast<unsigned>(limit) >= 5) return set(limit, value);
  SlowPath one_at_a_time;
  const std::uint64_t before = d->limit_charge[limit].load(std::memory_order_relaxed);
  const std::uint64_t wanted = limit_reservation(limit, value, resident_threads(*d));
  if (!move_limit_charge(*d, limit, wanted)) {
    GS_LOG(Info, "device %d: cuCtxSetLimit(%d, %llu) refused: it would reserve %.1f MiB past the quota",
           d->index, static_cast<int>(limit), static_cast<unsigned long long>(value),
           static_cast<double>(wanted - before) / (1 << 20));
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const CUresult r = set(limit, value);
  if (r != CUDA_SUCCESS) {
    move_limit_charge(*d, limit, before);  // nothing changed in the driver
  } else if (limit == CU_LIMIT_STACK_SIZE) {
    d->stack_per_thread.store(value, std::memory_order_relaxed);
    recompute_smallest_stack();
  }
  return r;
}

bool launch_stack_slow(CUfunction f, std::uint64_t local) {
  if (local == kLocalUnknown) {
    // First launch: the code (and with it the module's globals) loads now rather than unseen.
    const auto load = core_driver().function_load;
    if (load != nullptr) {
      AllocationInFlight flight;
      const ModuleLoad m = begin_module_load(nullptr, /*lazy=*/true);
      if (m.refused) return false;
      end_module_load(m, load(f));
    }
    local = local_bytes_of(f);
    if (local <= g_smallest_stack.load(std::memory_order_relaxed)) return true;
  }
  DeviceState* d = current_device_state();
  if (d == nullptr || d->ledger_dev < 0) return true;
  if (local <= d->stack_per_thread.load(std::memory_order_relaxed)) return true;
  SlowPath one_at_a_time;
  if (local <= d->stack_per_thread.load(std::memory_order_relaxed)) return true;
  // The driver grows the stack to what the function needs, for every resident thread, and keeps it.
  if (!move_limit_charge(*d, CU_LIMIT_STACK_SIZE,
                         limit_reservation(CU_LIMIT_STACK_SIZE, local, resident_threads(*d)))) {
    GS_LOG(Info,
           "device %d: a launch needing %llu bytes of stack per thread refused: growing the stack "
           "would pass the quota",
           d->index, static_cast<unsigned long long>(local));
    return false;
  }
  d->stack_per_thread.store(local, std::memory_order_relaxed);
  recompute_smallest_stack();
  return true;
}

void forget_functions() {
  for (FunctionSlot& slot : g_function_slots) slot.key.store(0, std::memory_order_release);
}

bool note_graph_allocation(CUgraph graph, int device, std::uint64_t bytes) {
  // Nothing is taken before upload or launch; a node larger than the quota could never be backed.
  DeviceState* d = device_state(device);
  if (d != nullptr && d->ledger_dev >= 0 && bytes > effective_quota(*d)) {
    refuse(*d, bytes);
    return false;
  }
  if (GraphSlot* slot = graph_slot(graph, true)) {
    slot->device.store(device, std::memory_order_relaxed);
    slot->bytes.fetch_add(bytes, std::memory_order_relaxed);
  }
  return true;
}

void note_graph_instantiated(CUgraphExec exec, CUgraph graph) {
  GraphSlot* from = graph_slot(graph, false);
  if (from == nullptr || from->bytes.load(std::memory_order_relaxed) == 0) {
    if (GraphSlot* stale = graph_slot(exec, false)) stale->bytes.store(0, std::memory_order_relaxed);
    return;
  }
  if (GraphSlot* slot = graph_slot(exec, true)) {
    slot->device.store(from->device.load(std::memory_order_relaxed), std::memory_order_relaxed);
    slot->bytes.store(from->bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
}

void forget_graph(const void* handle) {
  if (GraphSlot* slot = graph_slot(handle, false)) slot->bytes.store(0, std::memory_order_relaxed);
}

void sync_graph_charge(DeviceState& d) {
  if (d.ledger_dev < 0) return;
  SlowPath one_at_a_time;  // the watcher's sync against a launch growing the charge
  const std::uint64_t charge = d.graph_charge.load(std::memory_order_relaxed);
  const std::uint64_t reserved = graph_figure(d, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, charge);
  if (reserved > charge) {
    ledger()->charge_held(d.ledger_dev, reserved - charge);
  } else if (reserved < charge) {
    ledger()->release(d.ledger_dev, charge - reserved);
  }
  d.graph_charge.store(reserved, std::memory_order_relaxed);
}

bool trim_graph_pool(DeviceState& d) {
  if (d.ledger_dev < 0 || d.graph_charge.load(std::memory_order_relaxed) == 0) return false;
  const auto trim = core_driver().graph_mem_trim;
  if (trim == nullptr) return false;
  SlowPath one_at_a_time;
  const std::uint64_t before = d.graph_charge.load(std::memory_order_relaxed);
  if (trim(d.index) != CUDA_SUCCESS) return false;
  sync_graph_charge(d);
  return d.graph_charge.load(std::memory_order_relaxed) < before;
}

bool graph_pool_fits(CUgraphExec exec) {
  GraphSlot* slot = graph_slot(exec, false);
  if (slot == nullptr) return true;
  const std::uint64_t need = slot->bytes.load(std::memory_order_relaxed);
  if (need == 0) return true;
  DeviceState* d = device_state(slot->device.load(std::memory_order_relaxed));
  if (d == nullptr || d->ledger_dev < 0) return true;
  for (int attempt = 0; attempt < 2; ++attempt) {
    {
      SlowPath one_at_a_time;
      // The pool backs what graphs use now plus this graph's allocations, or keeps what it holds.
      const std::uint64_t charge = d->graph_charge.load(std::memory_order_relaxed);
      const std::uint64_t reserved = graph_figure(*d, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, charge);
      const std::uint64_t used = graph_figure(*d, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, 0);
      const std::uint64_t pool = reserved > used + need ? reserved : used + need;
      if (pool <= charge) return true;
      if (ledger()->try_reserve(d->ledger_dev, pool - charge)) {
        d->graph_charge.store(pool, std::memory_order_relaxed);
        return true;
      }
    }
    if (attempt != 0 || !trim_graph_pool(*d)) break;
  }
  refuse(*d, need);
  GS_LOG(Info,
         "device %d: a graph whose allocations need %.1f MiB refused: the graph pool would pass the quota",
         d->index, static_cast<double>(need) / (1 << 20));
  return false;
}

void graph_pool_settle(CUgraphExec exec) {
  GraphSlot* slot = graph_slot(exec, false);
  if (slot == nullptr || slot->bytes.load(std::memory_order_relaxed) == 0) return;
  DeviceState* d = device_state(slot->device.load(std::memory_order_relaxed));
  if (d == nullptr || d->ledger_dev < 0) return;
  SlowPath one_at_a_time;
  sync_graph_charge(*d);
}

namespace {

// The architecture fat-binary entries are chosen for (asked once; 0 when the driver cannot say).
int device_sm(DeviceState& d) {
  int sm = d.sm.load(std::memory_order_relaxed);
  if (sm >= 0) return sm;
  int major = 0, minor = 0;
  const auto attr = core_driver().device_attribute;
  sm = attr != nullptr &&
               attr(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d.index) == CUDA_SUCCESS &&
               attr(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d.index) == CUDA_SUCCESS &&
               major > 0 && major < 100 && minor >= 0 && minor < 10
           ? major * 10 + minor
           : 0;
  d.sm.store(sm, std::memory_order_relaxed);
  return sm;
}

}  // namespace

ModuleLoad begin_module_load(const void* image, bool lazy) {
  ModuleLoad m;
  m.lazy = lazy;
  DeviceState* d = current_device_state();
  if (d == nullptr || d->ledger_dev < 0) return m;
  m.device = d;
  const std::uint64_t quota = effective_quota(*d);
  const std::uint64_t used = ledger()->used(d->ledger_dev);
  // Charged at the load even where lazy loading takes the globals at the first launch (the driver
  // gives no other moment before it takes them): on the safe side, never after.
  const std::uint64_t globals =
      image == nullptr ? 0 : device_granular(image_globals(image, device_sm(*d)).bytes);
  if (quota != shm::kUnlimited && (used >= quota || globals > quota - used)) {
    GS_LOG(Info,
           "device %d: a module load refused: the container holds %.1f MiB of its %.1f MiB and the "
           "image declares %.1f MiB of globals",
           d->index, static_cast<double>(used) / (1 << 20), static_cast<double>(quota) / (1 << 20),
           static_cast<double>(globals) / (1 << 20));
    refuse(*d, globals);
    m.refused = true;
    return m;
  }
  if (globals != 0) {
    const Reservation r = reserve(d, globals);
    if (r.refused) {
      m.refused = true;
      return m;
    }
    m.reserved = globals;
  }
  m.done_before = g_allocs_done.load(std::memory_order_acquire);
  // Only this load in flight: anything else moving the figure meanwhile would be taken for it.
  m.measured = g_allocs_in_flight.load(std::memory_order_acquire) == 1 && own_driver_figure(*d, &m.before);
  return m;
}

void end_module_load(const ModuleLoad& m, CUresult result) {
  if (m.device == nullptr) return;
  DeviceState& d = *m.device;
  if (result != CUDA_SUCCESS) {
    if (m.reserved != 0) ledger()->release(d.ledger_dev, m.reserved);  // nothing was loaded
    return;
  }
  std::uint64_t grew = 0;
  std::uint64_t after = 0;
  const bool measured = m.measured && own_driver_figure(d, &after) &&
                        g_allocs_in_flight.load(std::memory_order_acquire) == 1 &&
                        g_allocs_done.load(std::memory_order_acquire) == m.done_before;
  if (measured && after > m.before) grew = after - m.before;
  // A first launch's loading takes globals a load already charged first.
  std::uint64_t due = grew;
  if (m.lazy && due != 0) {
    std::uint64_t prepaid = d.module_prepaid.load(std::memory_order_relaxed);
    std::uint64_t taken = 0;
    do {
      taken = prepaid < due ? prepaid : due;
    } while (!d.module_prepaid.compare_exchange_weak(prepaid, prepaid - taken));
    due -= taken;
  }
  // What the load took beyond its reservation is charged; what it has not taken yet is owed by the
  // first launches (lazy loading). Unmeasured: the next reconciliation charges what the books miss.
  const std::uint64_t extra = due > m.reserved ? due - m.reserved : 0;
  if (m.reserved > due) d.module_prepaid.fetch_add(m.reserved - due, std::memory_order_relaxed);
  if (extra != 0) ledger()->charge_held(d.ledger_dev, extra);
  d.module_charge.fetch_add(m.reserved + extra, std::memory_order_relaxed);
}

namespace driver_reservations {

void tick() {
  if (!memory_active()) return;
  for_each_ready_device([](DeviceState& d) {
    if (d.ledger_dev >= 0 && d.has_context.load(std::memory_order_relaxed)) sync_graph_charge(d);
  });
}

}  // namespace driver_reservations
}  // namespace gpuslice::interposer
