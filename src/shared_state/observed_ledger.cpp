#include "shared_state/observed_ledger.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <utility>

#include "common/errno_text.h"
#include "common/safe_file.h"
#include "shared_state/fault_guard.h"
#include "shared_state/layout.h"
#include "shared_state/ledger_view.h"

namespace gpuslice::shm::detail {
namespace {

using namespace layout;

struct FreeDeleter {
  void operator()(unsigned char* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<unsigned char, FreeDeleter>;

// Context of one guarded store into the mapping.
struct Store {
  LedgerView view;
  int dev = -1;
  std::uint64_t value = 0;
  std::uint32_t compute = 0;    // Caps: the compute cap (`value` is the quota cap)
  std::uint64_t guarantee = 0;  // Caps: the guarantee cap
  enum Kind { Quota, ComputeLimit, Caps, Guarantee, Refusal, Reap, Priority } kind = Quota;
  int fd = -1;
  const std::string* path = nullptr;
  int reaped = 0;
};

void apply_store(void* context) {
  auto* s = static_cast<Store*>(context);
  if (s->kind == Store::Reap) {
    s->reaped = s->view.reap_dead(s->fd, -1, *s->path);
    return;
  }
  if (s->kind == Store::Priority) {
    s->view.header->priority.store(static_cast<std::uint32_t>(s->value));
    return;
  }
  if (!s->view.device_ready(s->dev)) return;
  DeviceRecord& record = s->view.devices[s->dev];
  switch (s->kind) {
    case Store::Quota:
      record.requested_quota.store(s->value);
      recompute_limits(record);
      break;
    case Store::ComputeLimit:
      record.requested_compute.store(static_cast<std::uint32_t>(s->value));
      recompute_limits(record);
      break;
    case Store::Guarantee:
      s->view.header->requested_guarantee[s->dev].store(s->value);
      break;
    case Store::Caps:
      s->view.header->guarantee_cap[s->dev].store(s->guarantee);
      record.quota_cap.store(s->value);
      record.compute_cap.store(s->compute);
      recompute_limits(record);
      break;
    case Store::Refusal:
      record.refused_allocations.fetch_add(1, std::memory_order_relaxed);
      break;
    case Store::Reap:
    case Store::Priority:
      break;
  }
}

class ObservedLedger final : public Ledger {
 public:
  ObservedLedger(std::string path, int fd, bool writable)
      : path_(std::move(path)), fd_(fd), writable_(writable) {}
  ~ObservedLedger() override { ::close(fd_); }

  Result<int> attach_device(std::string_view uuid, int, std::uint64_t, std::uint64_t, unsigned) override {
    int found = find_device(uuid);
    if (found >= 0) return found;
    return make_error("an observer of " + path_ + " cannot add device " + std::string(uuid));
  }
  Result<bool> register_process() override {
    return make_error("an observer of " + path_ + " cannot register a process");
  }
  bool try_reserve(int, std::uint64_t) override { return false; }
  void release(int, std::uint64_t) override {}
  void charge_held(int, std::uint64_t) override {}
  std::uint64_t context_footprint(int) const override { return 0; }  // a process's concern only
  void note_context_footprint(int, std::uint64_t) override {}

  std::uint64_t quota(int dev) const override {
    DeviceRecord record;
    return read_record(dev, &record) ? record.quota.load() : 0;
  }
  unsigned compute_limit(int dev) const override {
    DeviceRecord record;
    return read_record(dev, &record) ? record.compute_limit.load() : kNoComputeLimit;
  }
  std::uint64_t used(int dev) const override {
    Buffer copy;
    auto view = read_copy(&copy);
    return view ? view->used(dev) : 0;
  }
  std::uint64_t used_by_self(int) const override { return 0; }

  void set_quota(int dev, std::uint64_t bytes) override { store(Store::Quota, dev, bytes); }
  void set_compute_limit(int dev, unsigned percent) override {
    store(Store::ComputeLimit, dev, percent > 100 ? 100 : percent);
  }
  void set_guarantee(int dev, std::uint64_t bytes) override { store(Store::Guarantee, dev, bytes); }
  std::uint64_t guarantee(int dev) const override {
    DeviceRecord record;
    if (!read_record(dev, &record)) return 0;
    const auto [requested, cap] = read_guarantees(dev);
    return effective_guarantee(requested, cap, record.quota.load());
  }
  void set_caps(int dev, DeviceLimits caps) override {
    if (!writable_) return;
    Store s;
    s.kind = Store::Caps;
    s.dev = dev;
    s.value = caps.quota;
    s.guarantee = caps.guarantee;
    s.compute = caps.compute > 100 ? 100 : caps.compute;
    with_mapping(&s);
  }
  DeviceLimits requested(int dev) const override {
    DeviceRecord record;
    if (!read_record(dev, &record)) return {};
    return {record.requested_quota.load(), record.requested_compute.load(), read_guarantees(dev).first};
  }
  DeviceLimits caps(int dev) const override {
    DeviceRecord record;
    if (!read_record(dev, &record)) return {};
    return {record.quota_cap.load(), record.compute_cap.load(), read_guarantees(dev).second};
  }
  void count_refusal(int dev) override { store(Store::Refusal, dev, 0); }
  void add_busy_ns(int, std::uint64_t) override {}
  ComputeShared* compute_state(int) override { return nullptr; }

  int reap_dead() override {
    if (!writable_) return 0;
    Store s;
    s.kind = Store::Reap;
    s.fd = fd_;
    s.path = &path_;
    return with_mapping(&s) ? s.reaped : 0;
  }

  Snapshot snapshot() const override {
    Buffer copy;
    auto view = read_copy(&copy);
    if (!view) {
      Snapshot failed;
      failed.path = path_;
      failed.error = view.error();
      return failed;
    }
    Snapshot snap = view->snapshot(path_);
    // The copy was taken slot by slot: drop a row whose slot changed hands since it was copied.
    std::erase_if(snap.processes, [&](const ProcessRow& row) {
      std::uint64_t now_word = 0;
      auto offset = static_cast<off_t>(kSlotsOffset + sizeof(Slot) * static_cast<std::size_t>(row.slot));
      return !fs::pread_exact(fd_, &now_word, sizeof now_word, offset) ||
             now_word != view->slots[row.slot].state.load();
    });
    return snap;
  }

  const std::string& path() const override { return path_; }
  void set_host_pid(int) override {}

  int find_device(std::string_view uuid) const override {
    Buffer copy;
    auto view = read_copy(&copy);
    return view ? view->find_device(uuid) : -1;
  }
  int device_count() const override {
    Buffer copy;
    auto view = read_copy(&copy);
    return view ? view->device_count() : 0;
  }
  const std::atomic<std::uint32_t>* compute_limit_source(int) const override { return nullptr; }
  void unregister_process() override {}
  int slot_index() const override { return -1; }
  bool writable() const override { return writable_; }

  void set_priority(Priority level) override {
    if (!writable_) return;
    Store s;
    s.kind = Store::Priority;
    s.value = priority_value(level);
    with_mapping(&s);
  }
  void init_priority(Priority) override {}
  std::optional<Priority> priority() const override {
    std::uint32_t stored = kNoPriority;
    if (!fs::pread_exact(fd_, &stored, sizeof stored, static_cast<off_t>(offsetof(Header, priority))))
      return std::nullopt;
    return priority_from_value(stored);
  }
  const std::atomic<std::uint32_t>* priority_source() const override { return nullptr; }
  void add_held_back_ns(std::uint64_t) override {}
  void note_node_channel_refused() override {}
  void note_assignment(std::optional<Priority>, bool) override {}

 private:
  // The file as it is now, if it still is a whole state file.
  Result<bool> check_size() const {
    struct stat st {};
    if (::fstat(fd_, &st) != 0)
      return make_error("cannot stat state file " + path_ + ": " + fs::errno_text(errno));
    if (static_cast<std::uint64_t>(st.st_size) != kFileSize) {
      return make_error("state file " + path_ + " is " + std::to_string(st.st_size) + " bytes now, not " +
                        std::to_string(kFileSize) + " (truncated or replaced while observed)");
    }
    return true;
  }

  Result<LedgerView> read_copy(Buffer* copy) const {
    auto sized = check_size();
    if (!sized) return make_error(sized.error());
    copy->reset(static_cast<unsigned char*>(std::aligned_alloc(alignof(Slot), kFileSize)));
    if (!*copy) return make_error("out of memory reading state file " + path_);
    if (!fs::pread_exact(fd_, copy->get(), kFileSize, 0)) {
      return make_error("state file " + path_ + " shrank while being read");
    }
    auto valid = validate_header_bytes(copy->get(), kFileSize, kFileSize, path_);
    if (!valid) return make_error(valid.error());
    return LedgerView::over(copy->get());
  }

  bool read_record(int dev, DeviceRecord* out) const {
    if (dev < 0 || dev >= static_cast<int>(kMaxDeviceRecords)) return false;
    auto offset = static_cast<off_t>(kDevicesOffset + sizeof(DeviceRecord) * static_cast<std::size_t>(dev));
    if (!fs::pread_exact(fd_, static_cast<void*>(out), sizeof *out, offset)) return false;
    return out->state.load() == kDeviceReady;
  }

  // The header's guarantee request and cap of record `dev` (0, 0 when unreadable).
  std::pair<std::uint64_t, std::uint64_t> read_guarantees(int dev) const {
    std::uint64_t requested = 0;
    std::uint64_t cap = 0;
    const auto at = [dev](std::size_t field) {
      return static_cast<off_t>(field + sizeof(std::uint64_t) * static_cast<std::size_t>(dev));
    };
    if (!fs::pread_exact(fd_, &requested, sizeof requested, at(offsetof(Header, requested_guarantee))) ||
        !fs::pread_exact(fd_, &cap, sizeof cap, at(offsetof(Header, guarantee_cap))))
      return {0, 0};
    return {requested, cap};
  }

  void store(Store::Kind kind, int dev, std::uint64_t value) {
    if (!writable_) return;
    Store s;
    s.kind = kind;
    s.dev = dev;
    s.value = value;
    with_mapping(&s);
  }

  // Maps the file only for the duration of one store; a truncation meanwhile faults into the guard.
  bool with_mapping(Store* s) {
    if (!check_size()) return false;
    void* base = ::mmap(nullptr, kFileSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (base == MAP_FAILED) return false;
    s->view = LedgerView::over(base);
    bool completed = run_fault_guarded(apply_store, s);
    ::munmap(base, kFileSize);
    return completed;
  }

  std::string path_;
  int fd_;
  bool writable_;
};

}  // namespace

std::unique_ptr<Ledger> make_observed_ledger(std::string path, int fd, bool writable) {
  return std::make_unique<ObservedLedger>(std::move(path), fd, writable);
}

}  // namespace gpuslice::shm::detail
