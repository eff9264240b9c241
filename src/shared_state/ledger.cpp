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
#include "common/errno_text.h"
#include "common/log.h"
#include "common/safe_file.h"
#include "shared_state/layout.h"
#include "shared_state/ledger_view.h"
#include "shared_state/observed_ledger.h"
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
using detail::monotonic_seconds;
using fs::errno_text;

// Creates the missing directories along `dir` like mkdir -p, private to us (0700): a directory
// meant to be shared is prepared by whoever shares it (see docs/shared-state.md).
Result<bool> make_directories(const std::string& dir) {
  std::string partial;
  std::size_t pos = 0;
  while (pos <= dir.size()) {
    std::size_t next = dir.find('/', pos);
    if (next == std::string::npos) next = dir.size();
    partial = dir.substr(0, next);
    pos = next + 1;
    if (partial.empty()) continue;
    if (mkdir(partial.c_str(), 0700) != 0 && errno != EEXIST) {
      return make_error("cannot create directory " + partial + ": " + errno_text(errno));
    }
  }
  return true;
}

// A directory processes may keep their state file in: owned by us or root, and writable by others
// only where they cannot replace our file (sticky) or where the operator shares it with a group on
// purpose (setgid and group-writable, not world-writable).
Result<bool> check_state_dir(int dirfd, const std::string& dir, struct stat* st) {
  if (fstat(dirfd, st) != 0) return make_error("cannot stat " + dir + ": " + errno_text(errno));
  const uid_t self = geteuid();
  if (st->st_uid != self && st->st_uid != 0) {
    return make_error("shared-state directory " + dir + " is owned by uid " + std::to_string(st->st_uid) +
                      ", neither us (uid " + std::to_string(self) + ") nor root; refusing a directory " +
                      "another user controls");
  }
  const bool sticky = (st->st_mode & S_ISVTX) != 0;
  const bool group_shared = (st->st_mode & S_ISGID) != 0;
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st->st_mode & 07777));
  if ((st->st_mode & S_IWOTH) != 0 && !sticky) {
    return make_error("shared-state directory " + dir + " (mode " + mode +
                      ") is world-writable without the sticky bit: anyone could replace the state file");
  }
  if ((st->st_mode & S_IWGRP) != 0 && !sticky && !group_shared) {
    return make_error("shared-state directory " + dir + " (mode " + mode +
                      ") is group-writable without the setgid or sticky bit; use 0700, 02770 (shared "
                      "by its group on purpose) or 01777");
  }
  return true;
}

// Only the owner may use a new state file, unless the directory is shared with a group on purpose
// (setgid, group-writable): then processes of several uids of that group share it. Never others.
mode_t state_file_mode(const struct stat& dir) {
  return (dir.st_mode & S_ISGID) != 0 && (dir.st_mode & S_IWGRP) != 0 ? 0660 : 0600;
}

// A process only uses a state file that we, root or (in a group-shared directory) the group own.
Result<bool> check_state_file_owner(int fd, const struct stat& dir, const std::string& path) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return make_error("cannot stat state file " + path + ": " + errno_text(errno));
  if (st.st_uid == geteuid() || st.st_uid == 0) return true;
  if ((dir.st_mode & S_ISGID) != 0 && st.st_gid == dir.st_gid && (st.st_mode & S_IWOTH) == 0) return true;
  return make_error("state file " + path + " is owned by uid " + std::to_string(st.st_uid) +
                    ": another user could read and change this container's limits; refusing it");
}

void fill_header(Header& h) {
  std::memset(static_cast<void*>(&h), 0, sizeof h);
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kLayoutVersion;
  h.header_size = static_cast<std::uint32_t>(kHeaderBytes);
  h.file_size = kFileSize;
  h.max_devices = kMaxDeviceRecords;
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
Result<bool> create_state_file(int dirfd, const struct stat& dir, const std::string& name,
                               const std::string& path) {
  static std::atomic<unsigned> counter{0};
  const mode_t mode = state_file_mode(dir);
  std::string temp;
  Result<int> opened = make_error("no temporary name tried");
  // A name can be taken by a creator that died with our pid (pids are reused): try the next.
  for (int attempt = 0; attempt < 16; ++attempt) {
    char suffix[64];
    std::snprintf(suffix, sizeof suffix, ".tmp.%d.%u", static_cast<int>(getpid()), counter.fetch_add(1));
    temp = name + suffix;
    opened = fs::open_in_dir(dirfd, temp.c_str(), O_RDWR | O_CREAT | O_EXCL, mode);
    if (opened || errno != EEXIST) break;
  }
  if (!opened) return make_error("cannot create a state file in " + path + ": " + opened.error());
  int fd = *opened;
  // The umask may have narrowed the mode; a group-shared file must really be group-writable.
  (void)fchmod(fd, mode);
  Header h;
  fill_header(h);
  bool written = ftruncate(fd, static_cast<off_t>(kFileSize)) == 0 &&
                 pwrite(fd, &h, offsetof(Header, slot_high_water), 0) ==
                     static_cast<ssize_t>(offsetof(Header, slot_high_water));
  int saved = errno;
  close(fd);
  if (!written) {
    unlinkat(dirfd, temp.c_str(), 0);
    return make_error("cannot initialise " + temp + ": " + errno_text(saved));
  }
  // A no-replace rename publishes without the file ever having a second link (readers refuse a
  // state file with more than one); a hard link is the way where the filesystem has no such rename.
  int rc = renameat2(dirfd, temp.c_str(), dirfd, name.c_str(), RENAME_NOREPLACE);
  if (rc != 0 && errno != EEXIST) {
    rc = linkat(dirfd, temp.c_str(), dirfd, name.c_str(), 0);
    if (rc != 0 && errno != EEXIST) {
      saved = errno;
      unlinkat(dirfd, temp.c_str(), 0);
      return make_error("cannot publish state file " + path + ": " + errno_text(saved));
    }
  }
  unlinkat(dirfd, temp.c_str(), 0);
  return true;
}

// A creator that died between creating its temporary file and publishing it leaves the file
// behind. Publishing takes microseconds, so one older than this was abandoned.
constexpr std::int64_t kAbandonedTempSeconds = 60;

// Removes abandoned `<state file>.tmp.*` files of ours next to the state file. Best effort.
void remove_abandoned_temp_files(int dirfd, const std::string& name) {
  int listing_fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (listing_fd < 0) return;
  DIR* listing = fdopendir(listing_fd);
  if (listing == nullptr) {
    close(listing_fd);
    return;
  }
  std::string prefix = name + ".tmp.";
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  while (dirent* entry = readdir(listing)) {
    if (std::strncmp(entry->d_name, prefix.c_str(), prefix.size()) != 0) continue;
    struct stat st {};
    if (fstatat(dirfd, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    if (st.st_uid != geteuid()) continue;
    if (now.tv_sec - st.st_mtim.tv_sec < kAbandonedTempSeconds) continue;
    if (unlinkat(dirfd, entry->d_name, 0) == 0)
      GS_LOG(Debug, "removed %s, abandoned by a creator that died", entry->d_name);
  }
  closedir(listing);
}

class MappedLedger final : public Ledger {
 public:
  MappedLedger(std::string path, Mode mode, int fd, bool writable, void* base)
      : path_(std::move(path)), mode_(mode), writable_(writable), fd_(fd), owner_pid_(current_pid()) {
    auto* bytes = static_cast<unsigned char*>(base);
    base_ = base;
    view_ = detail::LedgerView::over(base);
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
      for (std::uint32_t i = 0; i < kMaxDeviceRecords; ++i) {
        DeviceRecord& r = devices_[i];
        // A record left Initialising was abandoned by a creator that died holding the flock.
        if (r.state.load() == kDeviceReady) continue;
        r.state.store(kDeviceInitialising);
        r.cuda_index = cuda_index;
        r.total_bytes = total_bytes;
        std::memset(r.uuid, 0, sizeof r.uuid);
        std::memcpy(r.uuid, uuid.data(), uuid.size());
        r.requested_quota.store(quota_bytes);
        r.quota_cap.store(kUnlimited);
        header_->requested_guarantee[i].store(0);
        header_->guarantee_cap[i].store(0);
        header_->reclaim_episodes[i].store(0);
        header_->reclaim_ns[i].store(0);
        header_->reclaim_bytes[i].store(0);
        r.requested_compute.store(compute);
        r.compute_cap.store(kNoComputeLimit);
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
      return make_error("all " + std::to_string(kMaxDeviceRecords) + " device records of " + path_ +
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

  void charge_held(int dev, std::uint64_t bytes) override {
    if (!device_ready(dev) || bytes == 0) return;
    Slot* self = own_slot(true);
    if (self == nullptr) return;
    SlotDeviceCounters& mine = self->devices[dev];
    mine.charged.fetch_add(bytes);
    mine.granted.fetch_add(bytes);
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

  std::uint64_t used(int dev) const override { return view_.used(dev); }

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
    devices_[dev].requested_quota.store(bytes);
    detail::recompute_limits(devices_[dev]);
  }

  void set_compute_limit(int dev, unsigned percent) override {
    if (!writable_ || !device_ready(dev)) return;
    devices_[dev].requested_compute.store(percent > 100 ? 100 : percent);
    detail::recompute_limits(devices_[dev]);
  }

  void set_guarantee(int dev, std::uint64_t bytes) override {
    if (!writable_ || !device_ready(dev)) return;
    header_->requested_guarantee[dev].store(bytes);
  }

  std::uint64_t guarantee(int dev) const override {
    if (!device_ready(dev)) return 0;
    return effective_guarantee(header_->requested_guarantee[dev].load(), header_->guarantee_cap[dev].load(),
                               devices_[dev].quota.load());
  }

  void set_caps(int dev, DeviceLimits caps) override {
    if (!writable_ || !device_ready(dev)) return;
    header_->guarantee_cap[dev].store(caps.guarantee);
    devices_[dev].quota_cap.store(caps.quota);
    devices_[dev].compute_cap.store(caps.compute > 100 ? 100 : caps.compute);
    detail::recompute_limits(devices_[dev]);
  }

  DeviceLimits requested(int dev) const override {
    if (!device_ready(dev)) return {};
    return {devices_[dev].requested_quota.load(), devices_[dev].requested_compute.load(),
            header_->requested_guarantee[dev].load()};
  }

  DeviceLimits caps(int dev) const override {
    if (!device_ready(dev)) return {};
    return {devices_[dev].quota_cap.load(), devices_[dev].compute_cap.load(),
            header_->guarantee_cap[dev].load()};
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
    return view_.reap_dead(fd_.load(), own, path_);
  }

  Snapshot snapshot() const override { return view_.snapshot(path_); }

  const std::string& path() const override { return path_; }

  void set_host_pid(int host_pid) override {
    Slot* self = own_slot(false);
    if (self != nullptr) self->host_pid.store(host_pid);
  }

  int find_device(std::string_view uuid) const override { return view_.find_device(uuid); }

  int device_count() const override { return view_.device_count(); }

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
      view_.return_slot(index, slot_word(slot_generation(word), now, kSlotReaping));
    }
    unlock_slot(index);
  }

  int slot_index() const override { return owner_pid_.load() == current_pid() ? slot_.load() : -1; }

  bool writable() const override { return writable_; }

  void set_priority(Priority level) override {
    if (writable_) header_->priority.store(priority_value(level), std::memory_order_relaxed);
  }
  void init_priority(Priority level) override {
    std::uint32_t unset = kNoPriority;
    if (writable_) header_->priority.compare_exchange_strong(unset, priority_value(level));
  }
  std::optional<Priority> priority() const override {
    return priority_from_value(header_->priority.load(std::memory_order_relaxed));
  }
  std::uint64_t context_footprint(int dev) const override {
    return device_ready(dev) ? header_->context_footprint[dev].load(std::memory_order_relaxed) : 0;
  }

  void note_context_footprint(int dev, std::uint64_t bytes) override {
    if (!writable_ || !device_ready(dev)) return;
    std::atomic<std::uint64_t>& stored = header_->context_footprint[dev];
    std::uint64_t now = stored.load(std::memory_order_relaxed);
    while (now < bytes && !stored.compare_exchange_weak(now, bytes, std::memory_order_relaxed)) {
    }
  }

  const std::atomic<std::uint32_t>* priority_source() const override { return &header_->priority; }
  void set_reclaim_figures(int dev, std::uint64_t borrowed, std::uint64_t on_host) override {
    const int slot = slot_.load();
    if (!writable_ || slot < 0 || !device_ready(dev)) return;
    Slot& s = slots_[slot];
    s.borrowed_bytes.store(borrowed, std::memory_order_relaxed);
    s.on_host_bytes.store(on_host, std::memory_order_relaxed);
    s.reclaim_record.store(borrowed == 0 && on_host == 0 ? 0 : static_cast<std::uint64_t>(dev) + 1,
                           std::memory_order_relaxed);
  }
  void add_reclaim_episode(int dev, std::uint64_t ns, std::uint64_t bytes) override {
    if (!writable_ || !device_ready(dev)) return;
    header_->reclaim_episodes[dev].fetch_add(1, std::memory_order_relaxed);
    header_->reclaim_ns[dev].fetch_add(ns, std::memory_order_relaxed);
    header_->reclaim_bytes[dev].fetch_add(bytes, std::memory_order_relaxed);
  }
  void add_held_back_ns(std::uint64_t ns) override {
    if (writable_ && ns != 0) header_->held_back_ns.fetch_add(ns, std::memory_order_relaxed);
  }
  void note_node_channel_refused() override {
    if (writable_) header_->node_channel_refused.store(1, std::memory_order_relaxed);
  }
  void note_assignment(std::optional<Priority> assigned, bool refused) override {
    if (!writable_) return;
    header_->assigned_priority.store(assigned ? priority_value(*assigned) : kNoPriority,
                                     std::memory_order_relaxed);
    header_->assignment_refused.store(refused ? 1 : 0, std::memory_order_relaxed);
  }

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

  bool device_ready(int dev) const { return view_.device_ready(dev); }

  std::uint32_t high_water() const { return view_.high_water(); }

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
    int fd = ::open(path_.c_str(), (writable_ ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
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
    s.borrowed_bytes.store(0, std::memory_order_relaxed);
    s.on_host_bytes.store(0, std::memory_order_relaxed);
    s.reclaim_record.store(0, std::memory_order_relaxed);
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

  std::string path_;
  Mode mode_;
  bool writable_;
  std::atomic<int> fd_;
  std::atomic<pid_t> owner_pid_;  // the process that owns fd_ (differs in a fork child until adopted)
  std::atomic<int> slot_{-1};
  std::atomic<pid_t> control_{0};
  void* base_ = nullptr;
  detail::LedgerView view_;
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
  if (h.header_size != kHeaderBytes || h.max_devices != kMaxDeviceRecords || h.max_slots != kMaxSlots ||
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
  std::string dir, name;
  if (!fs::split_path(path, &dir, &name)) return make_error("shared-state path " + path + " names no file");
  if (mode == Mode::Process) {
    auto made = make_directories(dir);
    if (!made) return make_error(made.error());
  }
  // Observers (CLI, daemon) look at files a tenant can write: they trust no directory but open
  // nothing in it except a regular file, without following a symlink or blocking on a FIFO.
  auto opened_dir = fs::open_dir(dir, fs::DirTrust::Any);
  if (!opened_dir) {
    struct stat missing {};
    if (mode == Mode::Observer && lstat(dir.c_str(), &missing) != 0 && errno == ENOENT) {
      return make_error("no state file at " + path + " (its directory does not exist)");
    }
    return make_error("cannot use " + dir + " as the shared-state directory: " + opened_dir.error());
  }
  fs::UniqueFd dirfd(*opened_dir);
  struct stat dir_st {};
  if (mode == Mode::Process) {
    auto trusted = check_state_dir(dirfd.get(), dir, &dir_st);
    if (!trusted) return make_error(trusted.error());
  }

  fs::UniqueFd fd;
  bool writable = true;
  std::string last_error;
  for (int attempt = 0; attempt < 3 && !fd.valid(); ++attempt) {
    auto opened = fs::open_in_dir(dirfd.get(), name.c_str(), O_RDWR);
    const int open_errno = opened ? 0 : errno;
    if (!opened && mode == Mode::Observer && (errno == EACCES || errno == EROFS || errno == EPERM)) {
      // Enough to show the state; setting limits and reaping need write access.
      opened = fs::open_in_dir(dirfd.get(), name.c_str(), O_RDONLY);
      writable = !opened.ok();
    }
    if (opened) {
      fd.reset(*opened);
      break;
    }
    // A file that was missing when we opened may have been published by another creator since:
    // that is still the creation race (go round again), not an error.
    struct stat entry {};
    bool missing = open_errno == ENOENT ||
                   (fstatat(dirfd.get(), name.c_str(), &entry, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT);
    if (!missing) return make_error("cannot open state file " + path + ": " + opened.error());
    if (mode == Mode::Observer) {
      return make_error("no state file at " + path +
                        " (no process has run under gpuslice with this shared directory yet)");
    }
    auto created = create_state_file(dirfd.get(), dir_st, name, path);
    if (!created) return make_error(created.error());
    last_error = "created, then removed by someone else before it could be opened";
  }
  if (!fd.valid()) return make_error("cannot open state file " + path + ": " + last_error);
  if (mode == Mode::Process) {
    auto owned = check_state_file_owner(fd.get(), dir_st, path);
    if (!owned) return make_error(owned.error());
  }

  struct stat st {};
  if (fstat(fd.get(), &st) != 0)
    return make_error("cannot stat state file " + path + ": " + errno_text(errno));
  // A second name may be another container's file: what this observer changes (PUT /limits,
  // gpuslice set) or shows would be that container's. No writer of state files makes one.
  if (mode == Mode::Observer && st.st_nlink > 1) {
    return make_error("state file " + path + " has " + std::to_string(st.st_nlink) +
                      " links (another container's file may be linked in): refusing it");
  }
  unsigned char head[sizeof(Header)] = {};
  ssize_t got = pread(fd.get(), head, sizeof head, 0);
  if (got < 0) return make_error("cannot read state file " + path + ": " + errno_text(errno));
  auto valid = validate_header_bytes(head, static_cast<std::size_t>(got),
                                     static_cast<std::uint64_t>(st.st_size), path);
  if (!valid) return make_error(valid.error());
  if (mode == Mode::Observer) return detail::make_observed_ledger(path, fd.release(), writable);

  void* base = mmap(nullptr, kFileSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) return make_error("cannot map state file " + path + ": " + errno_text(errno));
  remove_abandoned_temp_files(dirfd.get(), name);
  return std::unique_ptr<Ledger>(new MappedLedger(path, mode, fd.release(), writable, base));
}

}  // namespace gpuslice::shm
