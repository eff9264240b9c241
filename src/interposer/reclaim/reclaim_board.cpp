#include "interposer/reclaim/reclaim_board.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "common/safe_file.h"
#include "shared_state/layout.h"
#include "shared_state/node_channel.h"
#include "shared_state/peer_record.h"
#include "shared_state/writer_index.h"

namespace gpuslice::interposer::reclaim {
namespace {

std::uint64_t monotonic_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(ts.tv_nsec);
}

std::uint64_t record_checksum(const BoardRecord& record) {
  return shm::layout::fnv1a64(&record, offsetof(BoardRecord, checksum));
}

// Lists `dir_fd` through a descriptor of its own, calling visit(name) for at most `limit` entries.
// Not a dup(): that shares the directory position, and two threads listing at once (an asking
// allocation beside the reclaim thread) took entries from each other's listing.
template <class Visit>
void list_dir(int dir_fd, std::size_t limit, Visit&& visit) {
  const int listing_fd = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (listing_fd < 0) return;
  DIR* listing = ::fdopendir(listing_fd);
  if (listing == nullptr) {
    ::close(listing_fd);
    return;
  }
  std::size_t seen = 0;
  while (dirent* entry = ::readdir(listing)) {
    if (entry->d_name[0] == '.') continue;
    if (++seen > limit) break;
    visit(entry->d_name);
  }
  ::closedir(listing);
}

}  // namespace

BoardRecord encode(const BoardEntry& entry, std::uint64_t uuid_hash) {
  BoardRecord r{};
  std::memcpy(r.magic, BoardRecord::kMagic, sizeof r.magic);
  r.version = BoardRecord::kVersion;
  r.size = sizeof(BoardRecord);
  r.uuid_hash = uuid_hash;
  r.container_key = entry.container_key;
  r.pid = entry.pid;
  r.priority = priority_value(entry.priority);
  r.heartbeat_ns = entry.heartbeat_ns;
  r.above_guarantee = entry.above_guarantee;
  r.movable = entry.movable;
  r.on_host = entry.on_host;
  r.wanted = entry.wanted;
  r.within_guarantee = entry.within_guarantee ? 1 : 0;
  r.checksum = record_checksum(r);
  return r;
}

bool decode(const BoardRecord& r, std::uint64_t uuid_hash, BoardEntry* out) {
  if (std::memcmp(r.magic, BoardRecord::kMagic, sizeof r.magic) != 0 || r.version != BoardRecord::kVersion ||
      r.size != sizeof(BoardRecord) || r.uuid_hash != uuid_hash || r.container_key == 0 ||
      r.checksum != record_checksum(r) || r.within_guarantee > 1)
    return false;
  const std::optional<Priority> level = priority_from_value(r.priority);
  if (!level) return false;
  out->container_key = r.container_key;
  out->pid = r.pid;
  out->priority = *level;
  out->heartbeat_ns = r.heartbeat_ns;
  out->above_guarantee = r.above_guarantee;
  out->movable = r.movable;
  out->on_host = r.on_host;
  out->wanted = r.wanted;
  out->within_guarantee = r.within_guarantee != 0;
  return true;
}

Board::Board(int node_fd, int writer_fd, int fd, std::string name, std::string uuid, std::uint64_t key)
    : node_fd_(node_fd),
      writer_fd_(writer_fd),
      fd_(fd),
      name_(std::move(name)),
      uuid_(std::move(uuid)),
      uuid_hash_(shm::detail::uuid_hash(uuid_)),
      key_(key),
      owner_(::getpid()) {}

Board::~Board() {
  // In a forked child the descriptors are the parent's copies: closing them is harmless.
  ::close(fd_.load());
  ::close(writer_fd_);
  ::close(node_fd_);
}

std::unique_ptr<Board> Board::open(const std::string& node_dir, std::string_view writer,
                                   std::string_view gpu_uuid, std::uint64_t container_key) {
  if (node_dir.empty() || container_key == 0 || gpu_uuid.empty()) return nullptr;
  const std::string writer_name = writer.empty() ? "uid-" + std::to_string(::geteuid()) : std::string(writer);
  fs::UniqueFd node(fs::open_dir_raw(node_dir.c_str(), fs::DirTrust::SharedSticky));
  if (!node.valid()) return nullptr;
  struct stat node_st {};
  if (::fstat(node.get(), &node_st) != 0) return nullptr;
  const bool created = ::mkdirat(node.get(), writer_name.c_str(), 0755) == 0;
  fs::UniqueFd dir(
      ::openat(node.get(), writer_name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir.valid()) return nullptr;
  struct stat st {};
  if (!fs::dir_trusted_raw(dir.get(), fs::DirTrust::SharedSticky) || ::fstat(dir.get(), &st) != 0 ||
      !shm::writer_trusted(writer_name.c_str(), st, ::geteuid(), node_st))
    return nullptr;
  if (created) (void)::fchmod(dir.get(), 0755);
  char name[192];
  std::snprintf(name, sizeof name, "reclaim.%.*s.%016llx.%d", static_cast<int>(gpu_uuid.size()),
                gpu_uuid.data(), static_cast<unsigned long long>(container_key),
                static_cast<int>(::getpid()));
  fs::UniqueFd fd(fs::open_in_dir_raw(dir.get(), name, O_RDWR | O_CREAT, 0644));
  if (!fd.valid()) return nullptr;
  (void)::fchmod(fd.get(), 0644);  // readable by the other containers whatever the umask
  if (::ftruncate(fd.get(), sizeof(BoardRecord)) != 0) return nullptr;
  const int node_fd = node.release();
  const int writer_fd = dir.release();
  return std::unique_ptr<Board>(
      new Board(node_fd, writer_fd, fd.release(), name, std::string(gpu_uuid), container_key));
}

bool Board::publish(const BoardEntry& own) {
  BoardEntry e = own;
  e.container_key = key_;
  e.pid = static_cast<std::int32_t>(::getpid());
  if (e.heartbeat_ns == 0) e.heartbeat_ns = monotonic_now_ns();
  const BoardRecord record = encode(e, uuid_hash_);
  // A record removed under us (the node channel removes records idle for ten minutes) is made anew:
  // writing on into the unlinked file would publish to nobody.
  // The old descriptor stays open: another thread may be writing through it (one per removal).
  int fd = fd_.load(std::memory_order_acquire);
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_nlink == 0 && ::getpid() == owner_) {
    const int fresh = fs::open_in_dir_raw(writer_fd_, name_.c_str(), O_RDWR | O_CREAT, 0644);
    if (fresh >= 0) {
      (void)::fchmod(fresh, 0644);
      if (::ftruncate(fresh, sizeof(BoardRecord)) != 0 || !fd_.compare_exchange_strong(fd, fresh))
        ::close(fresh);
    }
  }
  return fs::pwrite_exact(fd_.load(std::memory_order_acquire), &record, sizeof record, 0);
}

std::size_t Board::read(BoardEntry* out, std::size_t capacity, std::uint64_t now_ns,
                        std::uint64_t stale_ns) const {
  struct stat node_st {};
  if (capacity == 0 || ::fstat(node_fd_, &node_st) != 0) return 0;
  char prefix[96];
  const int prefix_length = std::snprintf(prefix, sizeof prefix, "reclaim.%s.", uuid_.c_str());
  if (prefix_length <= 0 || static_cast<std::size_t>(prefix_length) >= sizeof prefix) return 0;
  const auto own_pid = static_cast<std::int32_t>(::getpid());
  std::size_t count = 0;
  list_dir(node_fd_, kMaxWriters * 4, [&](const char* writer) {
    if (count >= capacity) return;
    struct stat st {};
    if (::fstatat(node_fd_, writer, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !shm::writer_trusted(writer, st, ::geteuid(), node_st))
      return;
    fs::UniqueFd dir(::openat(node_fd_, writer, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat opened {};
    if (!dir.valid() || ::fstat(dir.get(), &opened) != 0 || opened.st_ino != st.st_ino ||
        opened.st_dev != st.st_dev)
      return;
    // The level this writer's records are believed at: the operator's assignment caps it.
    shm::Assignment assigned;
    const Priority ceiling = shm::NodeChannel::read_assignment(node_fd_, writer, uuid_, &assigned)
                                 ? assigned.priority
                             : assigned.state == shm::Assignment::State::Refused ? Priority::Low
                                                                                 : Priority::Normal;
    std::size_t records = 0;
    list_dir(dir.get(), kMaxEntriesPerWriter, [&](const char* name) {
      if (count >= capacity || records >= kMaxRecordsPerWriter ||
          std::strncmp(name, prefix, static_cast<std::size_t>(prefix_length)) != 0)
        return;
      fs::UniqueFd fd(fs::open_in_dir_raw(dir.get(), name, O_RDONLY | O_NONBLOCK));
      struct stat file {};
      if (!fd.valid() || ::fstat(fd.get(), &file) != 0 ||
          file.st_size != static_cast<off_t>(sizeof(BoardRecord)))
        return;
      BoardRecord record{};
      BoardEntry entry;
      if (!fs::pread_exact(fd.get(), &record, sizeof record, 0) || !decode(record, uuid_hash_, &entry))
        return;
      ++records;
      if (entry.container_key == key_ && entry.pid == own_pid) return;  // our own
      if (shm::layout::heartbeat_distance_ns(entry.heartbeat_ns, now_ns) > stale_ns) return;
      entry.priority = lower_priority(entry.priority, ceiling);
      out[count++] = entry;
    });
  });
  return count;
}

void Board::withdraw() {
  if (::getpid() != owner_) return;
  ::unlinkat(writer_fd_, name_.c_str(), 0);
}

}  // namespace gpuslice::interposer::reclaim
