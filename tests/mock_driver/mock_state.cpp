#include "mock_state.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "mock_log.h"

namespace gpuslice::mock {
namespace {

constexpr const char* kFileName = "state-v1";

void lock_robust(pthread_mutex_t* mutex) {
  // The previous owner died inside the critical section: its half-written timeline is still a
  // valid (if slightly wrong) timeline, so carry on.
  if (pthread_mutex_lock(mutex) == EOWNERDEAD) pthread_mutex_consistent(mutex);
}

class DeviceLock {
 public:
  explicit DeviceLock(DeviceRecord& device) : mutex_(&device.lock) { lock_robust(mutex_); }
  ~DeviceLock() { pthread_mutex_unlock(mutex_); }
  DeviceLock(const DeviceLock&) = delete;
  DeviceLock& operator=(const DeviceLock&) = delete;

 private:
  pthread_mutex_t* mutex_;
};

bool make_dirs(const char* path) {
  char partial[sizeof(MockConfig::state_dir)];
  std::snprintf(partial, sizeof(partial), "%s", path);
  for (char* p = partial + 1; *p != '\0'; ++p) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(partial, 0700) != 0 && errno != EEXIST) return false;
    *p = '/';
  }
  return mkdir(partial, 0700) == 0 || errno == EEXIST;
}

bool process_gone(std::int32_t pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

std::uint64_t clock_ns(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<std::uint64_t>(ts.tv_nsec);
}

void init_mutex(pthread_mutex_t* mutex) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(mutex, &attr);
  pthread_mutexattr_destroy(&attr);
}

bool same_machine(const StateFile& file, const MockConfig& config) {
  if (file.device_count != config.device_count) return false;
  if ((file.fake_clock != 0) != (config.fake_clock_start_ns != 0)) return false;
  for (unsigned i = 0; i < config.device_count; ++i) {
    if (file.total_bytes[i] != config.total_bytes[i] || std::strcmp(file.uuid[i], config.uuid[i]) != 0) {
      return false;
    }
  }
  return true;
}

}  // namespace

bool SharedState::open_and_lock(const MockConfig& config, int* fd_out) {
  if (!make_dirs(config.state_dir)) {
    MOCK_LOG("cannot create state directory %s: %s", config.state_dir, std::strerror(errno));
    return false;
  }
  char path[sizeof(MockConfig::state_dir) + 16];
  std::snprintf(path, sizeof(path), "%s/%s", config.state_dir, kFileName);
  // Someone may replace a file of another layout between our open and our lock: retry until the
  // locked file is the one the path names.
  for (int attempt = 0; attempt < 8; ++attempt) {
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
      MOCK_LOG("cannot open %s: %s", path, std::strerror(errno));
      return false;
    }
    while (flock(fd, LOCK_EX) != 0 && errno == EINTR) {
    }
    struct stat locked {};
    struct stat named {};
    if (fstat(fd, &locked) != 0 || stat(path, &named) != 0 || locked.st_ino != named.st_ino ||
        locked.st_dev != named.st_dev) {
      close(fd);
      continue;
    }
    if (locked.st_size != 0 && locked.st_size != static_cast<off_t>(sizeof(StateFile))) {
      unlink(path);  // another layout: its users keep their (now unnamed) file
      close(fd);
      continue;
    }
    if (locked.st_size == 0 && ftruncate(fd, sizeof(StateFile)) != 0) {
      MOCK_LOG("cannot size %s: %s", path, std::strerror(errno));
      close(fd);
      return false;
    }
    void* mapping = mmap(nullptr, sizeof(StateFile), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mapping == MAP_FAILED) {
      MOCK_LOG("cannot map %s: %s", path, std::strerror(errno));
      close(fd);
      return false;
    }
    auto* file = static_cast<StateFile*>(mapping);
    if (file->magic.load(std::memory_order_acquire) == kStateMagic &&
        (file->version != kStateVersion || file->size != static_cast<std::uint32_t>(sizeof(StateFile)))) {
      munmap(mapping, sizeof(StateFile));
      unlink(path);
      close(fd);
      continue;
    }
    file_ = file;
    *fd_out = fd;
    return true;
  }
  MOCK_LOG("state file %s keeps changing under us", path);
  return false;
}

SharedState::AttachError SharedState::attach(const MockConfig& config, bool claim) {
  int fd = -1;
  for (unsigned d = 0; d < kMaxDevices; ++d) pinned_limit_[d] = config.mps ? config.mps_pinned_limit[d] : 0;
  if (!open_and_lock(config, &fd)) return AttachError::Io;
  if (file_->magic.load(std::memory_order_acquire) != kStateMagic) {
    for (auto& device : file_->device) init_mutex(&device.lock);
    seed(config);
    file_->version = kStateVersion;
    file_->size = static_cast<std::uint32_t>(sizeof(StateFile));
    file_->magic.store(kStateMagic, std::memory_order_release);
  } else {
    reclaim_dead();
    bool anyone_alive = false;
    for (auto& slot : file_->slot) anyone_alive |= slot.pid.load(std::memory_order_acquire) != 0;
    if (!anyone_alive) {
      seed(config);
    } else if (!same_machine(*file_, config)) {
      MOCK_LOG("state in %s was seeded by a running process with other GPUSLICE_MOCK_* values; using its",
               config.state_dir);
    }
  }
  AttachError result = AttachError::None;
  if (claim && !claim_slot()) {
    MOCK_LOG("all %u process slots of %s are taken", kMaxProcesses, config.state_dir);
    result = AttachError::NoFreeSlot;
  }
  flock(fd, LOCK_UN);
  close(fd);
  if (result != AttachError::None) {
    munmap(file_, sizeof(StateFile));
    file_ = nullptr;
  }
  return result;
}

void SharedState::seed(const MockConfig& config) {
  file_->device_count = config.device_count;
  file_->fake_clock = config.fake_clock_start_ns != 0 ? 1 : 0;
  file_->fake_now_ns.store(config.fake_clock_start_ns, std::memory_order_relaxed);
  for (unsigned i = 0; i < kMaxDevices; ++i) {
    file_->total_bytes[i] = config.total_bytes[i];
    std::memcpy(file_->uuid[i], config.uuid[i], kUuidLength);
    DeviceRecord& device = file_->device[i];
    DeviceLock lock(device);
    device.used_bytes.store(0, std::memory_order_relaxed);
    device.timeline.reset();
  }
}

bool SharedState::claim_slot() {
  const std::int32_t self = getpid();
  for (unsigned index = 0; index < kMaxProcesses; ++index) {
    ProcessSlot& slot = file_->slot[index];
    std::int32_t expected = 0;
    if (!slot.pid.compare_exchange_strong(expected, -self, std::memory_order_acq_rel)) continue;
    for (unsigned device = 0; device < kMaxDevices; ++device) {
      slot.used_bytes[device].store(0, std::memory_order_relaxed);
      slot.context_bytes[device].store(0, std::memory_order_relaxed);
      slot.has_context[device].store(0, std::memory_order_relaxed);
      DeviceLock lock(file_->device[device]);
      slot.timeline[device].reset();
    }
    slot.pid.store(self, std::memory_order_release);
    slot_ = static_cast<int>(index);
    return true;
  }
  return false;
}

void SharedState::release_slot(unsigned index) const {
  ProcessSlot& slot = file_->slot[index];
  for (unsigned device = 0; device < kMaxDevices; ++device) {
    std::uint64_t bytes = slot.used_bytes[device].exchange(0, std::memory_order_acq_rel);
    slot.context_bytes[device].store(0, std::memory_order_relaxed);
    slot.has_context[device].store(0, std::memory_order_relaxed);
    if (bytes != 0) file_->device[device].used_bytes.fetch_sub(bytes, std::memory_order_acq_rel);
  }
  slot.pid.store(0, std::memory_order_release);
}

void SharedState::detach() {
  if (file_ == nullptr) return;
  if (slot_ >= 0) {
    ProcessSlot& slot = file_->slot[slot_];
    slot.pid.store(-static_cast<std::int32_t>(getpid()), std::memory_order_release);
    release_slot(static_cast<unsigned>(slot_));
  }
  munmap(file_, sizeof(StateFile));
  file_ = nullptr;
  slot_ = -1;
}

void SharedState::abandon() {
  if (file_ != nullptr) munmap(file_, sizeof(StateFile));
  file_ = nullptr;
  slot_ = -1;
}

unsigned SharedState::reclaim_dead() const {
  const std::int32_t self = getpid();
  unsigned freed = 0;
  for (unsigned index = 0; index < kMaxProcesses; ++index) {
    ProcessSlot& slot = file_->slot[index];
    std::int32_t pid = slot.pid.load(std::memory_order_acquire);
    if (pid == 0) continue;
    std::int32_t owner = pid > 0 ? pid : -pid;
    if (owner == self || !process_gone(owner)) continue;
    if (!slot.pid.compare_exchange_strong(pid, -self, std::memory_order_acq_rel)) continue;
    MOCK_LOG("reclaiming the memory of dead process %d", static_cast<int>(owner));
    release_slot(index);
    ++freed;
  }
  return freed;
}

bool SharedState::charge(unsigned device, std::uint64_t bytes, bool is_context) {
  if (slot_ < 0 || device >= file_->device_count) return false;
  // MPS: the server refuses a client's memory past its pinned limit (contexts included).
  if (pinned_limit_[device] != 0) {
    const std::uint64_t mine = file_->slot[slot_].used_bytes[device].load(std::memory_order_relaxed);
    if (bytes > pinned_limit_[device] || mine > pinned_limit_[device] - bytes) return false;
  }
  const std::uint64_t total = file_->total_bytes[device];
  std::atomic<std::uint64_t>& used = file_->device[device].used_bytes;
  bool reclaimed = false;
  std::uint64_t current = used.load(std::memory_order_relaxed);
  for (;;) {
    if (bytes > total || current > total - bytes) {
      // A killed process may still hold memory in the file; a real card would have freed it.
      if (!reclaimed && reclaim_dead() > 0) {
        reclaimed = true;
        current = used.load(std::memory_order_relaxed);
        continue;
      }
      return false;
    }
    if (used.compare_exchange_weak(current, current + bytes, std::memory_order_acq_rel)) break;
  }
  ProcessSlot& slot = file_->slot[slot_];
  slot.used_bytes[device].fetch_add(bytes, std::memory_order_acq_rel);
  if (is_context) slot.context_bytes[device].fetch_add(bytes, std::memory_order_acq_rel);
  return true;
}

void SharedState::uncharge(unsigned device, std::uint64_t bytes, bool is_context) {
  if (slot_ < 0 || device >= kMaxDevices || bytes == 0) return;
  ProcessSlot& slot = file_->slot[slot_];
  slot.used_bytes[device].fetch_sub(bytes, std::memory_order_acq_rel);
  if (is_context) slot.context_bytes[device].fetch_sub(bytes, std::memory_order_acq_rel);
  file_->device[device].used_bytes.fetch_sub(bytes, std::memory_order_acq_rel);
}

void SharedState::set_has_context(unsigned device, bool present) {
  if (slot_ < 0 || device >= kMaxDevices) return;
  file_->slot[slot_].has_context[device].store(present ? 1 : 0, std::memory_order_release);
}

std::uint64_t SharedState::enqueue(unsigned device, std::uint64_t duration_ns) {
  DeviceRecord& record = file_->device[device];
  DeviceLock lock(record);
  std::uint64_t now = now_ns();
  std::uint64_t start = record.timeline.run_end > now ? record.timeline.run_end : now;
  std::uint64_t end = start + duration_ns;
  record.timeline.record(start, end);
  if (slot_ >= 0) file_->slot[slot_].timeline[device].record(start, end);
  return end;
}

std::uint64_t SharedState::now_ns() const {
  if (file_->fake_clock != 0) return file_->fake_now_ns.load(std::memory_order_acquire);
  return clock_ns(CLOCK_MONOTONIC);
}

void SharedState::wait_until(std::uint64_t deadline_ns) const {
  if (file_->fake_clock != 0) {
    std::uint64_t now = file_->fake_now_ns.load(std::memory_order_acquire);
    while (now < deadline_ns &&
           !file_->fake_now_ns.compare_exchange_weak(now, deadline_ns, std::memory_order_acq_rel)) {
    }
    return;
  }
  if (clock_ns(CLOCK_MONOTONIC) >= deadline_ns) return;  // the common case needs no system call
  timespec deadline{static_cast<time_t>(deadline_ns / 1000000000ULL),
                    static_cast<long>(deadline_ns % 1000000000ULL)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, nullptr) == EINTR) {
  }
}

void SharedState::advance_fake_clock(std::uint64_t ns) const {
  if (file_->fake_clock != 0) file_->fake_now_ns.fetch_add(ns, std::memory_order_acq_rel);
}

std::uint64_t SharedState::timestamp_us() const {
  if (file_->fake_clock != 0) return file_->fake_now_ns.load(std::memory_order_acquire) / 1000;
  return clock_ns(CLOCK_REALTIME) / 1000;
}

std::uint64_t SharedState::device_busy(unsigned device, std::uint64_t from, std::uint64_t to) const {
  DeviceRecord& record = file_->device[device];
  DeviceLock lock(record);
  return record.timeline.busy_between(from, to);
}

std::uint64_t SharedState::process_busy(unsigned slot, unsigned device, std::uint64_t from,
                                        std::uint64_t to) const {
  DeviceRecord& record = file_->device[device];
  DeviceLock lock(record);
  return file_->slot[slot].timeline[device].busy_between(from, to);
}

unsigned SharedState::processes_on(unsigned device, ProcessUsage* out, unsigned capacity) const {
  unsigned count = 0;
  for (unsigned index = 0; index < kMaxProcesses; ++index) {
    const ProcessSlot& slot = file_->slot[index];
    std::int32_t pid = slot.pid.load(std::memory_order_acquire);
    if (pid <= 0 || process_gone(pid)) continue;
    std::uint64_t used = slot.used_bytes[device].load(std::memory_order_acquire);
    std::uint64_t context = slot.context_bytes[device].load(std::memory_order_acquire);
    if (used == 0 && context == 0 && slot.has_context[device].load(std::memory_order_acquire) == 0) continue;
    if (count < capacity) out[count] = ProcessUsage{pid, used, context, index};
    ++count;
  }
  return count;
}

}  // namespace gpuslice::mock
