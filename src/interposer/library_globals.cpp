#include "interposer/library_globals.h"

#include <atomic>

#include "common/log.h"
#include "interposer/core_driver.h"
#include "interposer/devices.h"
#include "interposer/memory_books.h"
#include "interposer/module_image.h"

namespace gpuslice::interposer {
namespace {

// Libraries are loaded and unloaded rarely (a program's images, a framework's kernels): a small
// table under a spin lock, written at loads, unloads and context creations only.
struct LibrarySlot {
  std::uintptr_t handle = 0;                // 0: free
  std::uint64_t bytes[kMaxDevices] = {};    // its globals on each device's architecture
  std::uint64_t charged[kMaxDevices] = {};  // charged to the device's first context (or the load)
};
constexpr std::size_t kLibrarySlots = 256;
LibrarySlot g_libraries[kLibrarySlots];
std::atomic<bool> g_lock{false};

class TableLock {
 public:
  TableLock() {
    while (g_lock.exchange(true, std::memory_order_acquire)) {
    }
  }
  ~TableLock() { g_lock.store(false, std::memory_order_release); }
  TableLock(const TableLock&) = delete;
  TableLock& operator=(const TableLock&) = delete;
};

int ordinal_sm(int dev) {
  int major = 0, minor = 0;
  const auto attr = core_driver().device_attribute;
  if (attr == nullptr || attr(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) != CUDA_SUCCESS ||
      attr(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) != CUDA_SUCCESS || major <= 0 ||
      major >= 100 || minor < 0 || minor >= 10)
    return 0;
  return major * 10 + minor;
}

}  // namespace

void size_library(const void* image, LibrarySizes* sizes) {
  int count = 0;
  const auto device_count = core_driver().device_count;
  if (image == nullptr || device_count == nullptr || device_count(&count) != CUDA_SUCCESS) return;
  if (count > kMaxDevices) count = kMaxDevices;
  int sms[kMaxDevices] = {};
  for (int d = 0; d < count; ++d) {
    sms[d] = ordinal_sm(d);
    int same = 0;
    while (same < d && sms[same] != sms[d]) ++same;
    sizes->bytes[d] = same < d ? sizes->bytes[same] : device_granular(image_globals(image, sms[d]).bytes);
  }
}

bool reserve_where_contexts_exist(LibrarySizes* sizes, int skip) {
  bool fits = true;
  for_each_ready_device([&](DeviceState& d) {
    if (!fits || d.index == skip || d.index < 0 || d.index >= kMaxDevices || d.ledger_dev < 0 ||
        !d.has_context.load(std::memory_order_relaxed) || sizes->bytes[d.index] == 0)
      return;
    if (reserve(&d, sizes->bytes[d.index]).refused) {
      GS_LOG(Info, "device %d: a library load refused: its %.1f MiB of globals would pass the quota", d.index,
             static_cast<double>(sizes->bytes[d.index]) / (1 << 20));
      fits = false;
      return;
    }
    sizes->charged[d.index] = sizes->bytes[d.index];
  });
  if (!fits) release_reserved(*sizes);
  return fits;
}

void release_reserved(const LibrarySizes& sizes) {
  for (int d = 0; d < kMaxDevices; ++d) {
    if (sizes.charged[d] == 0) continue;
    if (DeviceState* state = device_state_if_attached(d); state != nullptr && state->ledger_dev >= 0)
      ledger()->release(state->ledger_dev, sizes.charged[d]);
  }
}

void note_library(CUlibrary library, LibrarySizes& sizes, int charged_device, std::uint64_t charged) {
  // Reserved on devices where a context exists: taken at the load or at a first launch there.
  for (int d = 0; d < kMaxDevices; ++d) {
    if (sizes.charged[d] == 0) continue;
    if (DeviceState* state = device_state_if_attached(d)) {
      state->module_prepaid.fetch_add(sizes.charged[d], std::memory_order_relaxed);
      state->module_charge.fetch_add(sizes.charged[d], std::memory_order_relaxed);
    }
  }
  if (library == nullptr) return;
  LibrarySizes& sized = sizes;
  if (charged_device >= 0 && charged_device < kMaxDevices) sized.charged[charged_device] += charged;
  bool any = false;
  for (int d = 0; d < kMaxDevices; ++d) any = any || sized.bytes[d] != 0 || sized.charged[d] != 0;
  if (!any) return;  // no globals (most kernels' libraries): nothing to reserve or give back
  if (charged_device < 0) {
    std::uint64_t most = 0;
    for (const std::uint64_t b : sized.bytes) most = b > most ? b : most;
    GS_LOG(Info,
           "a library declaring %.1f MiB of globals loaded while no context is current: every context "
           "created while it is loaded reserves them",
           static_cast<double>(most) / (1 << 20));
  }
  {
    TableLock lock;
    for (LibrarySlot& slot : g_libraries) {
      if (slot.handle != 0) continue;
      for (int d = 0; d < kMaxDevices; ++d) {
        slot.bytes[d] = sized.bytes[d];
        slot.charged[d] = sized.charged[d];
      }
      slot.handle = reinterpret_cast<std::uintptr_t>(library);
      return;
    }
  }
  static std::atomic<bool> said{false};
  if (!said.exchange(true))
    GS_LOG(Warn,
           "more than %zu libraries with globals loaded: further ones are booked when the driver's "
           "figure shows them",
           kLibrarySlots);
}

std::uint64_t library_globals(int device) {
  if (device < 0 || device >= kMaxDevices) return 0;
  std::uint64_t sum = 0;
  TableLock lock;
  for (const LibrarySlot& slot : g_libraries) {
    if (slot.handle != 0) sum += slot.bytes[device];
  }
  return sum;
}

void note_first_context_libraries(int device) {
  if (device < 0 || device >= kMaxDevices) return;
  TableLock lock;
  for (LibrarySlot& slot : g_libraries) {
    if (slot.handle != 0) slot.charged[device] += slot.bytes[device];
  }
}

void forget_library(CUlibrary library) {
  const auto key = reinterpret_cast<std::uintptr_t>(library);
  if (key == 0) return;
  std::uint64_t charged[kMaxDevices] = {};
  {
    TableLock lock;
    for (LibrarySlot& slot : g_libraries) {
      if (slot.handle != key) continue;
      for (int d = 0; d < kMaxDevices; ++d) charged[d] = slot.charged[d];
      slot = LibrarySlot{};
      break;
    }
  }
  for (int d = 0; d < kMaxDevices; ++d) {
    if (charged[d] == 0) continue;
    DeviceState* state = device_state_if_attached(d);
    if (state == nullptr || state->ledger_dev < 0) continue;
    // Still owed (never taken): the reconciliation keeps counting it owed, on the safe side.
    ledger()->release(state->ledger_dev, charged[d]);
    std::uint64_t held = state->module_charge.load(std::memory_order_relaxed);
    while (!state->module_charge.compare_exchange_weak(held, held > charged[d] ? held - charged[d] : 0)) {
    }
  }
}

void libraries_after_fork() {
  g_lock.store(false, std::memory_order_relaxed);  // a thread of the parent may have held it
  TableLock lock;
  for (LibrarySlot& slot : g_libraries) {
    for (int d = 0; d < kMaxDevices; ++d) slot.charged[d] = 0;
  }
}

}  // namespace gpuslice::interposer
