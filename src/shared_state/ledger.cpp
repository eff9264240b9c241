// The container ledger over the memory-mapped state file described in layout.h.
//
// Admission (try_reserve) is lock-free: a process adds the bytes to its own slot's `charged`
// counter, then sums `charged` over every slot below the high-water mark. Whichever of several
// concurrent reservations added last sees all the others in its sum (every step is seq_cst), so
// the reservations that pass can never together exceed the quota. A dead process's bytes are
// exactly its slot's counters, which a reaper returns once the slot's OFD lock is gone.
#include "shared_state/ledger.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "common/clock.h"
#include "common/log.h"
#include "shared_state/layout.h"
#include "shared_state/proc_identity.h"

namespace gpuslice::shm {
namespace {

// getpid() is a system call (glibc stopped caching it); reserve and release ask for the pid to
// notice a fork, so it is cached here and forgotten in the child of every fork.
std::atomic<pid_t> g_cached_pid{0};

void forget_cached_pid() { g_cached_pid.store(0, std::memory_order_relaxed); }

pid_t current_pid() {
  pid_t pid = g_cached_pid.load(std::memory_order_relaxed);
  if (pid != 0) [[likely]]
    return pid;
  static const bool registered = [] { return pthread_atfork(nullptr, nullptr, forget_cached_pid) == 0; }();
  pid = getpid();
  if (registered) g_cached_pid.store(pid, std::memory_order_relaxed);
  return pid;
}

}  // namespace

namespace {

using namespace layout;

// A claim not finished within this time belongs to a claimer that died before taking its lock.
constexpr std::uint64_t kStaleClaimSeconds = 2;
// A reap not finished within this time belongs to a reaper that died mid-way.
constexpr std::uint64_t kStaleReapSeconds = 10;

std::uint64_t monotonic_seconds() { return monotonic_ns() / 1000000000ULL; }

std::uint64_t seconds_since(std::uint64_t then_30bit, std::uint64_t now) {
  return (now - then_30bit) & 0x3FFFFFFFULL;
}

std::string errno_text(int err) { return std::strerror(err); }

bool uuid_equal(const char* stored, std::string_view uuid) {
  std::size_t n = strnlen(stored, kUuidBytes);
  if (n != uuid.size()) return false;
  for (std::size_t i = 0; i < n; ++i) {
    char a = stored[i], b = uuid[i];
    if (a >= 'A' && a <= 'Z') a = static_cast<char>(a - 'A' + 'a');
    if (b >= 'A' && b <= 'Z') b = static_cast<char>(b - 'A' + 'a');
    if (a != b) return false;
  }
  return true;
}

// Creates directories along `dir` like mkdir -p.
Result<bool> make_directories(const std::string& dir) {
  if (dir.empty()) return true;
  std::string partial;
  std::size_t pos = 0;
  while (pos <= dir.size()) {
    std::size_t next = dir.find('/', pos);
    if (next == std::string::npos) next = dir.size();
    partial = dir.substr(0, next);
    pos = next + 1;
    if (partial.empty()) continue;
    if (mkdir(partial.c_str(), 0777) != 0 && errno != EEXIST) {
      return make_error("cannot create directory " + partial + ": " + errno_text(errno));
    }
  }
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return make_error("cannot use " + dir + " as the shared-state directory: not a directory");
  }
  return true;
}

void fill_header(Header& h) {
  std::memset(static_cast<void*>(&h), 0, sizeof h);
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kLayoutVersion;
  h.header_size = static_cast<std::uint32_t>(kHeaderBytes);
  h.file_size = kFileSize;
  h.max_devices = kMaxDevices;
  h.max_slots = kMaxSlots;
  h.device_record_size = sizeof(DeviceRecord);
  h.slot_size = sizeof(Slot);
  h.devices_offset = kDevicesOffset;
  h.slots_offset = kSlotsOffset;
  h.created_realtime_ns = realtime_ns();
  h.checksum = header_checksum(h);
}

// Builds a complete file under a temporary name and links it into place, so no process can ever
// open a half-initialised state file. Losing the race to another creator is not an error.
Result<bool> create_state_file(const std::string& path) {
  std::size_t slash = path.rfind('/');
  if (slash != std::string::npos) {
    auto made = make_directories(path.substr(0, slash));
    if (!made) return made;
  }
  static std::atomic<unsigned> counter{0};
  char suffix[64];
  std::snprintf(suffix, sizeof suffix, ".tmp.%d.%u", static_cast<int>(getpid()), counter.fetch_add(1));
  std::string temp = path + suffix;
  int fd = ::open(temp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) return make_error("cannot create " + temp + ": " + errno_text(errno));
  // Every process of the container shares the file whatever its uid (see docs/security.md).
  (void)fchmod(fd, 0666);
  Header h;
  fill_header(h);
  bool written = ftruncate(fd, static_cast<off_t>(kFileSize)) == 0 &&
                 pwrite(fd, &h, offsetof(Header, slot_high_water), 0) ==
                     static_cast<ssize_t>(offsetof(Header, slot_high_water));
  int saved = errno;
  close(fd);
  if (!written) {
    unlink(temp.c_str());
    return make_error("cannot initialise " + temp + ": " + errno_text(saved));
  }
  int rc = link(temp.c_str(), path.c_str());
  if (rc != 0 && errno != EEXIST) {
    // Some filesystems refuse hard links; a no-replace rename publishes as atomically.
    rc = renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE);
    if (rc != 0 && errno != EEXIST) {
      saved = errno;
      unlink(temp.c_str());
      return make_error("cannot publish state file " + path + ": " + errno_text(saved));
    }
  }
  unlink(temp.c_str());
  return true;
}

// A creator that died between creating its temporary file and publishing it leaves the file
// behind. Publishing takes microseconds, so one older than this was abandoned.
constexpr std::int64_t kAbandonedTempSeconds = 60;

// Removes abandoned `<state file>.tmp.*` files next to `path`. Best effort: errors are ignored.
void remove_abandoned_temp_files(const std::string& path) {
  std::size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
  std::string prefix = (slash == std::string::npos ? path : path.substr(slash + 1)) + ".tmp.";
  DIR* listing = opendir(dir.c_str());
  if (listing == nullptr) return;
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  while (dirent* entry = readdir(listing)) {
    if (std::strncmp(entry->d_name, prefix.c_str(), prefix.size()) != 0) continue;
    struct stat st {};
    if (fstatat(dirfd(listing), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
      continue;
    if (now.tv_sec - st.st_mtim.tv_sec < kAbandonedTempSeconds) continue;
    if (unlinkat(dirfd(listing), entry->d_name, 0) == 0)
      GS_LOG(Debug, "removed %s/%s, abandoned by a creator that died", dir.c_str(), entry->d_name);
  }
  closedir(listing);
}

class MappedLedger final : public Ledger {
 public:
  MappedLedger(std::string path, Mode mode, int fd, bool writable, void* base)
      : path_(std::move(path)), mode_(mode), writable_(writable), fd_(fd), owner_pid_(current_pid()) {
    auto* bytes = static_cast<unsigned char*>(base);
    base_ = base;
    header_ = reinterpret_cast<Header*>(bytes);
    devices_ = reinterpret_cast<DeviceRecord*>(bytes + kDevicesOffset);
    slots_ = reinterpret_cast<Slot*>(bytes + kSlotsOffset);
  }

  ~MappedLedger() override {
    if (owner_pid_.load() == current_pid()) unregister_process();
    munmap(base_, kFileSize);
    close(fd_.load());
  }

  Result<int> attach_device(std::string_view uuid, int cuda_index, std::uint64_t total_bytes,
                            std::uint64_t quota_bytes, unsigned compute) override {
    if (uuid.empty() || uuid.size() >= kUuidBytes) {
      return make_error("cannot attach a device with an empty or over-long UUID to " + path_);
    }
    if (compute > 100) return make_error("compute limit above 100% for device " + std::string(uuid));
    int found = find_device(uuid);
    if (found >= 0) return found;
    if (!writable_) return make_error(path_ + " is read-only: cannot add device " + std::string(uuid));
    adopt_after_fork();
    // Creation is rare and must not race with another creator of the same UUID: the guard orders
    // this process's threads (which share one file description, so the flock alone would not),
    // the flock other processes; the kernel drops it if its holder dies mid-way.
    ControlGuard guard(*this);
    int fd = fd_.load();
    while (flock(fd, LOCK_EX) != 0) {
      if (errno != EINTR) return make_error("cannot lock " + path_ + ": " + errno_text(errno));
    }
    found = find_device(uuid);
    if (found < 0) {
      for (std::uint32_t i = 0; i < kMaxDevices; ++i) {
        DeviceRecord& r = devices_[i];
        // A record left Initialising was abandoned by a creator that died holding the flock.
        if (r.state.load() == kDeviceReady) continue;
        r.state.store(kDeviceInitialising);
        r.cuda_index = cuda_index;
        r.total_bytes = total_bytes;
        std::memset(r.uuid, 0, sizeof r.uuid);
        std::memcpy(r.uuid, uuid.data(), uuid.size());
        r.quota.store(quota_bytes);
        r.compute_limit.store(compute);
        r.refused_allocations.store(0);
        r.compute.tokens_ns.store(0);
        r.compute.refilled_at_ns.store(0);
        r.compute.covered_until_ns.store(0);
        r.compute.busy_total_ns.store(0);
        r.state.store(kDeviceReady, std::memory_order_release);
        found = static_cast<int>(i);
        break;
      }
    }
    flock(fd, LOCK_UN);
    if (found < 0) {
      return make_error("all " + std::to_string(kMaxDevices) + " device records of " + path_ +
                        " are in use; cannot add " + std::string(uuid));
    }
    return found;
  }

  Result<bool> register_process() override {
    if (mode_ != Mode::Process) return make_error("an observer of " + path_ + " cannot register a process");
    if (!writable_) return make_error(path_ + " is read-only: cannot register");
    adopt_after_fork();
    if (slot_.load() >= 0) return true;
    ControlGuard guard(*this);
    if (slot_.load() >= 0) return true;
    pid_t pid = current_pid();
    for (int round = 0; round < 4; ++round) {
      for (std::uint32_t i = 0; i < kMaxSlots; ++i) {
        if (try_claim(i, pid)) {
          slot_.store(static_cast<int>(i));
          return true;
        }
      }
    }
    return make_error("no free process slot in " + path_ + " (all " + std::to_string(kMaxSlots) +
                      " are in use by live processes)");
  }

  bool try_reserve(int dev, std::uint64_t bytes) override {
    if (!device_ready(dev)) return false;
    if (bytes == 0) return true;
    Slot* self = own_slot(true);
    if (self == nullptr) return false;
    SlotDeviceCounters& mine = self->devices[dev];
    std::atomic<std::uint64_t>& quota_ref = devices_[dev].quota;
    if (quota_ref.load() == kUnlimited) {
      mine.charged.fetch_add(bytes);
      mine.granted.fetch_add(bytes);
      return true;
    }
    for (int attempt = 0; attempt < 2; ++attempt) {
      std::uint64_t limit = quota_ref.load();
      if (limit == kUnlimited || bytes <= limit) {
        mine.charged.fetch_add(bytes);
        if (limit == kUnlimited || !charged_exceeds(dev, limit)) {
          mine.granted.fetch_add(bytes);
          return true;
        }
        mine.charged.fetch_sub(bytes);
      }
      if (attempt == 0) reap_dead();
    }
    return false;
  }

  void release(int dev, std::uint64_t bytes) override {
    if (!device_ready(dev)) return;
    Slot* self = own_slot(false);
    if (self == nullptr) return;
    SlotDeviceCounters& mine = self->devices[dev];
    // An upper bound of what this process holds, for the over-release guard: `returned` first,
    // then `granted`. In the other order another thread's reserve+release landing between the two
    // reads makes the bound too small, and a legitimate release would be clamped (bytes leaked).
    std::uint64_t returned_before = mine.returned.load();
    std::uint64_t held = mine.granted.load() - returned_before;
    if (bytes > held) {
      GS_LOG(Debug, "release of %llu bytes on device %d exceeds the %llu this process holds",
             static_cast<unsigned long long>(bytes), dev, static_cast<unsigned long long>(held));
      bytes = held;
    }
    // Committed usage drops before admission room opens, so a sampler never sees both.
    mine.returned.fetch_add(bytes);
    mine.charged.fetch_sub(bytes);
  }

  std::uint64_t quota(int dev) const override { return device_ready(dev) ? devices_[dev].quota.load() : 0; }

  unsigned compute_limit(int dev) const override {
    return device_ready(dev) ? devices_[dev].compute_limit.load() : kNoComputeLimit;
  }

  std::uint64_t used(int dev) const override {
    if (!device_ready(dev)) return 0;
    std::uint32_t high = high_water();
    // Every `granted` first, then every `returned`: the difference is at most what the container
    // held at the moment between the two passes, so it never overstates usage.
    std::uint64_t granted = 0, returned = 0;
    for (std::uint32_t i = 0; i < high; ++i) granted += slots_[i].devices[dev].granted.load();
    for (std::uint32_t i = 0; i < high; ++i) returned += slots_[i].devices[dev].returned.load();
    std::uint64_t used_bytes = granted - returned;
    // Wrapped below zero: frees landed between the passes; nothing is held that we can prove.
    return used_bytes > (kUnlimited >> 1) ? 0 : used_bytes;
  }

  std::uint64_t used_by_self(int dev) const override {
    if (!device_ready(dev)) return 0;
    int slot = slot_.load();
    if (slot < 0 || owner_pid_.load() != current_pid()) return 0;
    const SlotDeviceCounters& mine = slots_[slot].devices[dev];
    std::uint64_t granted = mine.granted.load();
    std::uint64_t held = granted - mine.returned.load();
    // Wrapped below zero: another thread's reserve+free landed between the reads.
    return held > (kUnlimited >> 1) ? 0 : held;
  }

  void set_quota(int dev, std::uint64_t bytes) override {
    if (!writable_ || !device_ready(dev)) return;
    devices_[dev].quota.store(bytes);
  }

  void set_compute_limit(int dev, unsigned percent) override {
    if (!writable_ || !device_ready(dev)) return;
    devices_[dev].compute_limit.store(percent > 100 ? 100 : percent);
  }

  void count_refusal(int dev) override {
    if (!writable_ || !device_ready(dev)) return;
    devices_[dev].refused_allocations.fetch_add(1, std::memory_order_relaxed);
  }

  void add_busy_ns(int dev, std::uint64_t ns) override {
    if (!device_ready(dev)) return;
    Slot* self = own_slot(false);
    if (self != nullptr) self->devices[dev].busy_ns.fetch_add(ns, std::memory_order_relaxed);
  }

  ComputeShared* compute_state(int dev) override {
    if (!writable_ || !device_ready(dev)) return nullptr;
    return &devices_[dev].compute;
  }

  int reap_dead() override {
    if (!writable_) return 0;
    adopt_after_fork();
    int own = owner_pid_.load() == current_pid() ? slot_.load() : -1;
    std::uint32_t high = high_water();
    std::uint64_t now = monotonic_seconds();
    int reaped = 0;
    for (std::uint32_t i = 0; i < high; ++i) {
      if (static_cast<int>(i) == own) continue;
      Slot& s = slots_[i];
      std::uint64_t word = s.state.load();
      switch (slot_state(word)) {
        case kSlotFree:
          break;
        case kSlotClaiming:
          if (seconds_since(slot_claim_second(word), now) >= kStaleClaimSeconds && !lock_held(i)) {
            s.state.compare_exchange_strong(word, slot_word(slot_generation(word), 0, kSlotFree));
          }
          break;
        case kSlotActive:
          if (!lock_held(i) &&
              s.state.compare_exchange_strong(word, slot_word(slot_generation(word), now, kSlotReaping))) {
            return_slot(i, slot_word(slot_generation(word), now, kSlotReaping));
            ++reaped;
          }
          break;
        case kSlotReaping:
          if (seconds_since(slot_claim_second(word), now) >= kStaleReapSeconds &&
              s.state.compare_exchange_strong(word, slot_word(slot_generation(word), now, kSlotReaping))) {
            return_slot(i, slot_word(slot_generation(word), now, kSlotReaping));
          }
          break;
      }
    }
    return reaped;
  }

  Snapshot snapshot() const override {
    Snapshot snap;
    snap.path = path_;
    std::vector<int> records;
    for (std::uint32_t r = 0; r < kMaxDevices; ++r) {
      const DeviceRecord& d = devices_[r];
      if (d.state.load(std::memory_order_acquire) != kDeviceReady) continue;
      DeviceRow row;
      row.uuid.assign(d.uuid, strnlen(d.uuid, kUuidBytes));
      row.index = d.cuda_index;
      row.total_bytes = d.total_bytes;
      row.quota = d.quota.load();
      row.compute_limit = d.compute_limit.load();
      row.used = used(static_cast<int>(r));
      row.refused_allocations = d.refused_allocations.load();
      row.record = static_cast<int>(r);
      snap.devices.push_back(std::move(row));
      records.push_back(static_cast<int>(r));
    }
    std::uint32_t high = high_water();
    for (std::uint32_t i = 0; i < high; ++i) {
      const Slot& s = slots_[i];
      std::uint64_t word = s.state.load();
      if (slot_state(word) != kSlotActive) continue;
      ProcessRow row;
      row.pid = s.pid.load();
      row.host_pid = s.host_pid.load();
      row.command = read_command(s);
      for (int r : records) {
        const SlotDeviceCounters& c = s.devices[r];
        std::uint64_t granted = c.granted.load();
        std::uint64_t held = granted - c.returned.load();
        row.used_by_device.push_back(held > (kUnlimited >> 1) ? 0 : held);
        row.busy_ns_by_device.push_back(c.busy_ns.load());
      }
      // Reaped and reused while we read: the row would mix two processes.
      if (s.state.load() != word) continue;
      row.slot = static_cast<int>(i);
      snap.processes.push_back(std::move(row));
    }
    return snap;
  }

  const std::string& path() const override { return path_; }

  void set_host_pid(int host_pid) override {
    Slot* self = own_slot(false);
    if (self != nullptr) self->host_pid.store(host_pid);
  }

  int find_device(std::string_view uuid) const override {
    for (std::uint32_t i = 0; i < kMaxDevices; ++i) {
      const DeviceRecord& r = devices_[i];
      if (r.state.load(std::memory_order_acquire) == kDeviceReady && uuid_equal(r.uuid, uuid)) {
        return static_cast<int>(i);
      }
    }
    return -1;
  }

  int device_count() const override {
    int n = 0;
    for (std::uint32_t i = 0; i < kMaxDevices; ++i) {
      if (devices_[i].state.load(std::memory_order_acquire) == kDeviceReady) ++n;
    }
    return n;
  }

  const std::atomic<std::uint32_t>* compute_limit_source(int dev) const override {
    return device_ready(dev) ? &devices_[dev].compute_limit : nullptr;
  }

  void unregister_process() override {
    if (owner_pid_.load() != current_pid()) return;
    int slot = slot_.exchange(-1);
    if (slot < 0) return;
    auto index = static_cast<std::uint32_t>(slot);
    Slot& s = slots_[index];
    std::uint64_t word = s.state.load();
    std::uint64_t now = monotonic_seconds();
    if (slot_state(word) == kSlotActive &&
        s.state.compare_exchange_strong(word, slot_word(slot_generation(word), now, kSlotReaping))) {
      return_slot(index, slot_word(slot_generation(word), now, kSlotReaping));
    }
    unlock_slot(index);
  }

  int slot_index() const override { return owner_pid_.load() == current_pid() ? slot_.load() : -1; }

  bool writable() const override { return writable_; }

 private:
  // Serialises registration and post-fork adoption within a process. Holds the owner's pid, so a
  // child whose parent forked while holding it can take it over (the holder thread is not copied).
  class ControlGuard {
   public:
    explicit ControlGuard(MappedLedger& ledger) : ledger_(ledger) {
      pid_t me = current_pid();
      for (;;) {
        pid_t holder = ledger_.control_.load();
        // A holder from another process is the parent's thread that held it across fork().
        if (holder != me && ledger_.control_.compare_exchange_weak(holder, me)) break;
        if (holder == me) sched_yield();
      }
    }
    ~ControlGuard() { ledger_.control_.store(0); }
    ControlGuard(const ControlGuard&) = delete;
    ControlGuard& operator=(const ControlGuard&) = delete;

   private:
    MappedLedger& ledger_;
  };

  bool device_ready(int dev) const {
    return dev >= 0 && dev < static_cast<int>(kMaxDevices) &&
           devices_[dev].state.load(std::memory_order_acquire) == kDeviceReady;
  }

  std::uint32_t high_water() const {
    std::uint32_t high = header_->slot_high_water.load();
    return high > kMaxSlots ? kMaxSlots : high;
  }

  bool charged_exceeds(int dev, std::uint64_t limit) const {
    std::uint32_t high = high_water();
    std::uint64_t sum = 0;
    for (std::uint32_t i = 0; i < high; ++i) {
      std::uint64_t next = sum + slots_[i].devices[dev].charged.load();
      if (next < sum || next > limit) return true;
      sum = next;
    }
    return false;
  }

  // This process's slot: after a fork the child first gets its own descriptor (and, when
  // `claim` is set, its own slot), so it never charges or returns the parent's bytes.
  Slot* own_slot(bool claim) {
    if (owner_pid_.load(std::memory_order_relaxed) != current_pid()) adopt_after_fork();
    int slot = slot_.load(std::memory_order_acquire);
    if (slot >= 0) [[likely]]
      return &slots_[slot];
    if (!claim || mode_ != Mode::Process) return nullptr;
    auto registered = register_process();
    if (!registered) {
      GS_LOG(Error, "%s", registered.error().c_str());
      return nullptr;
    }
    slot = slot_.load(std::memory_order_acquire);
    return slot >= 0 ? &slots_[slot] : nullptr;
  }

  // The child of a fork shares its parent's open file description, hence its OFD locks: it must
  // open its own before it can hold a lock, or tell the parent's lock from its own.
  void adopt_after_fork() {
    pid_t me = current_pid();
    if (owner_pid_.load() == me) return;
    ControlGuard guard(*this);
    if (owner_pid_.load() == me) return;
    int old_fd = fd_.load();
    int fd = ::open(path_.c_str(), (writable_ ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    struct stat now_st {};
    struct stat old_st {};
    if (fd >= 0 && (fstat(fd, &now_st) != 0 || fstat(old_fd, &old_st) != 0 ||
                    now_st.st_ino != old_st.st_ino || now_st.st_dev != old_st.st_dev)) {
      GS_LOG(Error, "%s was replaced since this process's parent opened it; keeping the inherited one",
             path_.c_str());
      close(fd);
      fd = -1;
    }
    if (fd < 0) {
      // Without a descriptor of our own we would misjudge the parent's lock: keep the shared one
      // and hold no slot (reservations then fail, which is the safe side).
      GS_LOG(Error, "cannot reopen %s after fork: %s", path_.c_str(), errno_text(errno).c_str());
    } else {
      fd_.store(fd);
      close(old_fd);
    }
    slot_.store(-1);
    owner_pid_.store(me);
  }

  bool try_claim(std::uint32_t index, pid_t pid) {
    Slot& s = slots_[index];
    std::uint64_t word = s.state.load();
    if (slot_state(word) != kSlotFree) return false;
    std::uint64_t generation = slot_generation(word) + 1;
    std::uint64_t claiming = slot_word(generation, monotonic_seconds(), kSlotClaiming);
    if (!s.state.compare_exchange_strong(word, claiming)) return false;
    if (!lock_slot(index)) {
      s.state.compare_exchange_strong(claiming, slot_word(generation, 0, kSlotFree));
      return false;
    }
    s.pid.store(static_cast<std::int32_t>(pid));
    s.host_pid.store(detect_host_pid());
    s.registered_realtime_ns.store(realtime_ns());
    std::uint64_t words[kCommandWords];
    read_own_command(words);
    for (std::size_t w = 0; w < kCommandWords; ++w) s.command[w].store(words[w], std::memory_order_relaxed);
    // Visible to every reservation's sum before this slot can hold any bytes.
    std::uint32_t high = header_->slot_high_water.load();
    while (high < index + 1 && !header_->slot_high_water.compare_exchange_weak(high, index + 1)) {
    }
    std::uint64_t active = slot_word(generation, monotonic_seconds(), kSlotActive);
    if (!s.state.compare_exchange_strong(claiming, active)) {
      // A reaper judged the claim stale before we took the lock; the slot is no longer ours.
      unlock_slot(index);
      return false;
    }
    return true;
  }

  // Returns every byte a slot holds and frees it. `word` is the Reaping word we installed.
  void return_slot(std::uint32_t index, std::uint64_t word) {
    Slot& s = slots_[index];
    for (std::uint32_t d = 0; d < kMaxDevices; ++d) {
      SlotDeviceCounters& c = s.devices[d];
      // Committed usage first (returned catches up with granted), then admission room.
      c.returned.store(c.granted.load());
      c.charged.store(0);
      c.busy_ns.store(0, std::memory_order_relaxed);
    }
    s.pid.store(0);
    s.host_pid.store(0);
    for (auto& w : s.command) w.store(0, std::memory_order_relaxed);
    s.state.compare_exchange_strong(word, slot_word(slot_generation(word), 0, kSlotFree));
  }

  bool lock_op(std::uint32_t index, short type, int cmd) const {
    struct flock fl {};
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = static_cast<off_t>(slot_lock_offset(index));
    fl.l_len = 1;
    return fcntl(fd_.load(), cmd, &fl) == 0;
  }

  bool lock_slot(std::uint32_t index) { return lock_op(index, F_WRLCK, F_OFD_SETLK); }
  void unlock_slot(std::uint32_t index) { lock_op(index, F_UNLCK, F_OFD_SETLK); }

  // Whether some other open file description holds the slot's lock, i.e. its owner lives. On any
  // doubt the answer is yes: reaping a live process would hand out memory it still holds.
  bool lock_held(std::uint32_t index) const {
    struct flock fl {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = static_cast<off_t>(slot_lock_offset(index));
    fl.l_len = 1;
    if (fcntl(fd_.load(), F_OFD_GETLK, &fl) != 0) {
      static std::atomic<bool> logged{false};
      if (!logged.exchange(true)) {
        GS_LOG(Error, "cannot query slot locks of %s (%s): dead processes will not be reaped", path_.c_str(),
               errno_text(errno).c_str());
      }
      return true;
    }
    return fl.l_type != F_UNLCK;
  }

  static std::string read_command(const Slot& s) {
    char text[kCommandWords * 8 + 1] = {};
    for (std::size_t w = 0; w < kCommandWords; ++w) {
      std::uint64_t word = s.command[w].load(std::memory_order_relaxed);
      std::memcpy(text + w * 8, &word, 8);
    }
    return std::string(text, strnlen(text, sizeof text - 1));
  }

  std::string path_;
  Mode mode_;
  bool writable_;
  std::atomic<int> fd_;
  std::atomic<pid_t> owner_pid_;  // the process that owns fd_ (differs in a fork child until adopted)
  std::atomic<int> slot_{-1};
  std::atomic<pid_t> control_{0};
  void* base_ = nullptr;
  Header* header_ = nullptr;
  DeviceRecord* devices_ = nullptr;
  Slot* slots_ = nullptr;
};

}  // namespace

Result<bool> validate_header_bytes(const void* data, std::size_t available, std::uint64_t file_size,
                                   const std::string& path) {
  const std::string where = "state file " + path;
  auto* bytes = static_cast<const unsigned char*>(data);
  if (file_size == 0) {
    return make_error(where + " is empty (truncated): remove it and restart the container's processes");
  }
  std::size_t magic_bytes = available < sizeof kMagic ? available : sizeof kMagic;
  if (std::memcmp(bytes, kMagic, magic_bytes) != 0) {
    return make_error(where + " is not a gpuslice state file (foreign magic; expected \"GPUSLICE\")");
  }
  constexpr std::size_t kFixed = offsetof(Header, checksum) + sizeof(std::uint64_t);
  if (available < kFixed || file_size < kFixed) {
    return make_error(where + " is truncated: " + std::to_string(file_size) + " bytes, smaller than its " +
                      std::to_string(kFixed) + "-byte header");
  }
  Header h;
  std::memcpy(static_cast<void*>(&h), bytes, kFixed);
  if (h.version != kLayoutVersion) {
    const char* relation = h.version < kLayoutVersion ? "an older" : "a newer";
    return make_error(where + " has " + relation + " layout version " + std::to_string(h.version) +
                      " (this gpuslice reads version " + std::to_string(kLayoutVersion) +
                      "): stop the processes using it and remove it, or use a matching gpuslice");
  }
  std::uint64_t computed = header_checksum(h);
  if (computed != h.checksum) {
    char text[160];
    std::snprintf(text, sizeof text,
                  " is corrupted: header checksum mismatch (stored %016llx, computed %016llx)",
                  static_cast<unsigned long long>(h.checksum), static_cast<unsigned long long>(computed));
    return make_error(where + text);
  }
  if (h.header_size != kHeaderBytes || h.max_devices != kMaxDevices || h.max_slots != kMaxSlots ||
      h.device_record_size != sizeof(DeviceRecord) || h.slot_size != sizeof(Slot) ||
      h.devices_offset != kDevicesOffset || h.slots_offset != kSlotsOffset || h.file_size != kFileSize) {
    return make_error(where + " has the wrong size: its header declares " + std::to_string(h.file_size) +
                      " bytes and a geometry that layout version " + std::to_string(kLayoutVersion) +
                      " does not use (" + std::to_string(kFileSize) + " bytes)");
  }
  if (file_size < h.file_size) {
    return make_error(where + " is truncated: " + std::to_string(file_size) + " bytes, its header declares " +
                      std::to_string(h.file_size));
  }
  if (file_size > h.file_size) {
    return make_error(where + " has the wrong size: " + std::to_string(file_size) +
                      " bytes, its header declares " + std::to_string(h.file_size));
  }
  return true;
}

Result<std::unique_ptr<Ledger>> Ledger::open(const std::string& path, Mode mode) {
  if (path.empty()) return make_error("no shared-state file path given");
  int fd = -1;
  bool writable = true;
  for (int attempt = 0; attempt < 3 && fd < 0; ++attempt) {
    fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd >= 0) break;
    int err = errno;
    if (mode == Mode::Observer && (err == EACCES || err == EROFS || err == EPERM)) {
      // Enough to show the state; setting limits and reaping need write access.
      fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      writable = false;
      if (fd >= 0) break;
      err = errno;
    }
    if (err != ENOENT) return make_error("cannot open state file " + path + ": " + errno_text(err));
    if (mode == Mode::Observer) {
      return make_error("no state file at " + path +
                        " (no process has run under gpuslice with this shared directory yet)");
    }
    auto created = create_state_file(path);
    if (!created) return make_error(created.error());
  }
  if (fd < 0) return make_error("cannot open state file " + path + ": it keeps disappearing");

  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return make_error("cannot stat state file " + path + ": " + errno_text(err));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return make_error("state file " + path + " is not a regular file");
  }
  unsigned char head[sizeof(Header)] = {};
  ssize_t got = pread(fd, head, sizeof head, 0);
  if (got < 0) {
    int err = errno;
    close(fd);
    return make_error("cannot read state file " + path + ": " + errno_text(err));
  }
  auto valid = validate_header_bytes(head, static_cast<std::size_t>(got),
                                     static_cast<std::uint64_t>(st.st_size), path);
  if (!valid) {
    close(fd);
    return make_error(valid.error());
  }
  int prot = writable ? PROT_READ | PROT_WRITE : PROT_READ;
  void* base = mmap(nullptr, kFileSize, prot, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    int err = errno;
    close(fd);
    return make_error("cannot map state file " + path + ": " + errno_text(err));
  }
  if (mode == Mode::Process) remove_abandoned_temp_files(path);
  return std::unique_ptr<Ledger>(new MappedLedger(path, mode, fd, writable, base));
}

}  // namespace gpuslice::shm
