#include "shared_state/node_turns.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gpuslice::shm {

Result<std::unique_ptr<NodeTurns>> NodeTurns::open(const std::string& dir, std::string_view gpu_uuid) {
  ::mkdir(dir.c_str(), 01777);  // shared by every container of the host; may already exist
  std::string path = dir + "/turns-" + std::string(gpu_uuid);
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return make_error(path + ": " + std::strerror(errno));
  ::fchmod(fd, 0666);  // containers may run as different users
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return make_error(path + ": " + std::strerror(errno));
  }
  // Growing to the full size zero-fills; every opener writes the same magic, so racing creators agree.
  if (static_cast<std::size_t>(st.st_size) < sizeof(TurnTable) && ::ftruncate(fd, sizeof(TurnTable)) != 0) {
    ::close(fd);
    return make_error(path + ": cannot size the file: " + std::strerror(errno));
  }
  void* p = ::mmap(nullptr, sizeof(TurnTable), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return make_error(path + ": mmap: " + std::strerror(errno));
  auto* table = static_cast<TurnTable*>(p);
  static const char kZero[8] = {};
  if (std::memcmp(table->magic, kZero, sizeof kZero) == 0) {
    table->entries = TurnTable::kEntries;
    std::memcpy(table->magic, TurnTable::kMagic, sizeof TurnTable::kMagic);
  } else if (std::memcmp(table->magic, TurnTable::kMagic, sizeof TurnTable::kMagic) != 0 ||
             table->entries != TurnTable::kEntries) {
    ::munmap(p, sizeof(TurnTable));
    return make_error(path + ": not a gpuslice turn table (foreign or other version)");
  }
  return std::unique_ptr<NodeTurns>(new NodeTurns(table, sizeof(TurnTable)));
}

NodeTurns::~NodeTurns() { ::munmap(table_, size_); }

std::uint64_t NodeTurns::refresh(std::uint64_t container, unsigned limit_percent, std::uint64_t period_ns,
                                 std::uint64_t now_ns, std::uint64_t stale_ns) {
  auto fresh = [&](const TurnEntry& e) {
    std::uint64_t beat = e.heartbeat_ns.load(std::memory_order_acquire);
    return beat != 0 && now_ns - beat < stale_ns;
  };
  if (own_ < 0 || table_->entry[own_].container.load(std::memory_order_acquire) != container) {
    own_ = -1;
    for (std::uint32_t i = 0; i < TurnTable::kEntries && own_ < 0; ++i) {
      if (table_->entry[i].container.load(std::memory_order_acquire) == container) own_ = static_cast<int>(i);
    }
    // Claim a free entry, or one whose container stopped refreshing it.
    for (std::uint32_t i = 0; i < TurnTable::kEntries && own_ < 0; ++i) {
      TurnEntry& e = table_->entry[i];
      std::uint64_t holder = e.container.load(std::memory_order_acquire);
      if (holder != 0 && fresh(e)) continue;
      // A claimer publishes its heartbeat before anyone can judge the entry stale again.
      if (e.container.compare_exchange_strong(holder, container, std::memory_order_acq_rel)) {
        e.heartbeat_ns.store(now_ns, std::memory_order_release);
        own_ = static_cast<int>(i);
      }
    }
    if (own_ < 0) return kNoTurn;  // table full: fall back to uncoordinated limiting
  }
  TurnEntry& mine = table_->entry[own_];
  mine.limit_percent.store(limit_percent, std::memory_order_relaxed);
  mine.heartbeat_ns.store(now_ns, std::memory_order_release);
  std::uint64_t before = 0;
  unsigned active = 0;
  for (std::uint32_t i = 0; i < TurnTable::kEntries; ++i) {
    const TurnEntry& e = table_->entry[i];
    if (e.container.load(std::memory_order_acquire) == 0 || !fresh(e)) continue;
    unsigned pct = e.limit_percent.load(std::memory_order_relaxed);
    if (pct == 0 || pct >= 100) continue;
    ++active;
    if (static_cast<int>(i) < own_) before += pct;
  }
  if (active < 2) return kNoTurn;
  return (before % 100) * (period_ns / 100);
}

}  // namespace gpuslice::shm
