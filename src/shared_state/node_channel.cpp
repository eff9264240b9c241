#include "shared_state/node_channel.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "common/clock.h"
#include "common/errno_text.h"
#include "common/log.h"
#include "common/safe_file.h"
#include "common/text.h"
#include "shared_state/layout.h"
#include "shared_state/peer_record.h"
#include "shared_state/writer_index.h"

namespace gpuslice::shm {
namespace detail {

std::uint64_t peer_checksum(const PeerRecord& record) {
  return layout::fnv1a64(&record, offsetof(PeerRecord, checksum));
}

std::uint64_t uuid_hash(std::string_view uuid) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (char c : uuid) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

bool peer_record_valid(const PeerRecord& record, std::uint64_t expected_uuid_hash) {
  return std::memcmp(record.magic, PeerRecord::kMagic, sizeof record.magic) == 0 &&
         record.version == PeerRecord::kVersion && record.size == sizeof(PeerRecord) &&
         record.uuid_hash == expected_uuid_hash && record.container_key != 0 &&
         record.compute_limit_percent <= 100 && priority_from_value(record.priority).has_value() &&
         record.checksum == peer_checksum(record);
}

bool peer_record_from_bytes(const unsigned char* bytes, std::size_t size, std::uint64_t uuid_hash,
                            PeerRecord* out) {
  if (size == sizeof(PeerRecord)) {
    std::memcpy(out, bytes, sizeof *out);
    return peer_record_valid(*out, uuid_hash);
  }
  if (size != PeerRecord::kVersion2Size) return false;
  // Version 2: the same fields up to held_back_ns, then its checksum over them.
  constexpr std::size_t kFields = offsetof(PeerRecord, device_share_permille);
  static_assert(kFields + sizeof(std::uint64_t) == PeerRecord::kVersion2Size);
  PeerRecord old{};
  std::memcpy(&old, bytes, kFields);
  std::uint64_t checksum = 0;
  std::memcpy(&checksum, bytes + kFields, sizeof checksum);
  if (std::memcmp(old.magic, PeerRecord::kMagic, sizeof old.magic) != 0 ||
      old.version != PeerRecord::kVersion2 || old.size != PeerRecord::kVersion2Size ||
      checksum != layout::fnv1a64(bytes, kFields)) {
    return false;
  }
  // Valid as a record of this version: the same checks on the fields, with a fresh checksum.
  old.version = PeerRecord::kVersion;
  old.size = sizeof(PeerRecord);
  old.checksum = peer_checksum(old);
  if (!peer_record_valid(old, uuid_hash)) return false;
  *out = old;
  return true;
}

}  // namespace detail

namespace {

using detail::PeerRecord;

// Record files of our own writer directory untouched for this long belong to containers that are
// gone; the directory's owner removes them so it does not grow without bound.
constexpr std::int64_t kAbandonedRecordSeconds = 600;

std::string record_name(std::string_view uuid, std::uint64_t key) {
  char hex[24];
  std::snprintf(hex, sizeof hex, ".%016" PRIx64, key);
  return std::string(uuid) + hex;
}

// getdents64 through syscall(): opendir would allocate, and the wrapper getdents64() is newer than
// the glibc the library must load on. Entries are read from a caller's buffer in place.
class DirListing {
 public:
  struct Entry {
    const char* name = nullptr;
    unsigned char type = DT_UNKNOWN;
  };
  // A listing that goes on from what an earlier one left in `buffer` (*filled bytes returned by
  // getdents64, *position consumed), and leaves its own there.
  DirListing(int fd, char* buffer, std::size_t size, std::size_t* filled, std::size_t* position)
      : fd_(fd), buffer_(buffer), size_(size), filled_(*filled), position_(*position) {}
  // A listing from the descriptor's position with nothing returned yet.
  DirListing(int fd, char* buffer, std::size_t size)
      : DirListing(fd, buffer, size, &own_filled_, &own_position_) {}
  DirListing(const DirListing&) = delete;
  DirListing& operator=(const DirListing&) = delete;

  // False at the end of the directory or on an error.
  bool next(Entry* entry) {
    if (position_ >= filled_) {
      long got = -1;
      do {
        got = ::syscall(SYS_getdents64, fd_, buffer_, size_);
      } while (got < 0 && errno == EINTR);
      if (got <= 0) {
        filled_ = position_ = 0;
        return false;
      }
      filled_ = static_cast<std::size_t>(got);
      position_ = 0;
    }
    // struct linux_dirent64: u64 d_ino, s64 d_off, u16 d_reclen, u8 d_type, char d_name[].
    constexpr std::size_t kLengthAt = 16, kTypeAt = 18, kNameAt = 19;
    const char* raw = buffer_ + position_;
    std::uint16_t length = 0;
    if (filled_ - position_ < kNameAt + 1) return false;
    std::memcpy(&length, raw + kLengthAt, sizeof length);
    if (length < kNameAt + 1 || length > filled_ - position_) return false;
    entry->type = static_cast<unsigned char>(raw[kTypeAt]);
    entry->name = raw + kNameAt;
    position_ += length;
    return true;
  }

 private:
  int fd_;
  char* buffer_;
  std::size_t size_;
  std::size_t own_filled_ = 0;
  std::size_t own_position_ = 0;
  std::size_t& filled_;
  std::size_t& position_;
};

// A record file's name for this GPU: "<uuid>.<16 lower-case hex digits>"; false for anything else.
bool record_key(const char* name, std::string_view uuid, std::uint64_t* key) {
  if (std::strncmp(name, uuid.data(), uuid.size()) != 0 || name[uuid.size()] != '.') return false;
  const char* hex = name + uuid.size() + 1;
  std::uint64_t value = 0;
  for (int i = 0; i < 16; ++i) {
    const char c = hex[i];
    unsigned digit = 0;
    if (c >= '0' && c <= '9') {
      digit = static_cast<unsigned>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      digit = static_cast<unsigned>(c - 'a' + 10);
    } else {
      return false;
    }
    value = value << 4 | digit;
  }
  if (hex[16] != '\0') return false;
  *key = value;
  return true;
}

// Opens (creating if needed) our writer directory: ours or root's, and replaceable by nobody else.
Result<int> open_writer_dir(int node_fd, const std::string& node_dir, const std::string& writer) {
  struct stat node_st {};
  if (::fstat(node_fd, &node_st) != 0)
    return make_error(node_dir + ": cannot stat: " + fs::errno_text(errno));
  // On Kubernetes it is a mount point in a read-only mount: EEXIST, or EROFS then ENOENT below.
  const bool created = ::mkdirat(node_fd, writer.c_str(), 0755) == 0;
  if (!created && errno != EEXIST && errno != EROFS) {
    return make_error(node_dir + "/" + writer + ": cannot create: " + fs::errno_text(errno));
  }
  struct stat entry {};
  if (::fstatat(node_fd, writer.c_str(), &entry, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(entry.st_mode)) {
    return make_error(node_dir + "/" + writer + ": is a symbolic link; refusing to follow it");
  }
  int fd = ::openat(node_fd, writer.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return make_error(node_dir + "/" + writer + ": " + fs::errno_text(errno));
  fs::UniqueFd guard(fd);
  auto trusted = fs::check_dir(fd, fs::DirTrust::SharedSticky, node_dir + "/" + writer);
  if (!trusted) return make_error(trusted.error());
  // Readers believe a uid-N directory only when uid N owns it: publishing in another would be
  // publishing to nobody (and a squatter's uid-<us> must not become ours).
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return make_error(node_dir + "/" + writer + ": cannot stat: " + fs::errno_text(errno));
  if (!writer_trusted(writer.c_str(), st, ::geteuid(), node_st)) {
    return make_error(node_dir + "/" + writer + ": owned by uid " + std::to_string(st.st_uid) +
                      ", but a uid-N writer directory must be owned by uid N; readers would ignore it");
  }
  // Peers must be able to read it whatever our umask (077 would hide every record).
  if (created) (void)::fchmod(fd, 0755);
  return guard.release();
}

void remove_abandoned_records(int writer_fd, std::string_view keep) {
  int listing_fd = ::dup(writer_fd);
  if (listing_fd < 0) return;
  DIR* listing = ::fdopendir(listing_fd);
  if (listing == nullptr) {
    ::close(listing_fd);
    return;
  }
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  while (dirent* entry = ::readdir(listing)) {
    if (entry->d_name[0] == '.' || keep == entry->d_name) continue;
    struct stat st {};
    if (::fstatat(writer_fd, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    if (st.st_uid != ::geteuid() || now.tv_sec - st.st_mtim.tv_sec < kAbandonedRecordSeconds) continue;
    ::unlinkat(writer_fd, entry->d_name, 0);
  }
  ::closedir(listing);
}

// Opens and reads one record file of a peer; -1 for anything that is not a valid record of this
// GPU, else the open file (the caller closes it).
int open_record(int dir_fd, const char* name, std::uint64_t uuid_hash, PeerRecord* out,
                struct stat* identity) {
  const int fd = fs::open_in_dir_raw(dir_fd, name, O_RDONLY | O_NONBLOCK);
  if (fd < 0) return -1;
  struct stat& st = *identity;
  unsigned char bytes[sizeof(PeerRecord)];
  if (::fstat(fd, &st) != 0 || (st.st_size != static_cast<off_t>(sizeof(PeerRecord)) &&
                                st.st_size != static_cast<off_t>(PeerRecord::kVersion2Size))) {
    ::close(fd);
    return -1;
  }
  const auto file_size = static_cast<std::size_t>(st.st_size);
  if (!fs::pread_exact(fd, bytes, file_size, 0) ||
      !detail::peer_record_from_bytes(bytes, file_size, uuid_hash, out)) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Re-reads a record file kept open: exactly one record's bytes, of this version or the previous
// one (a longer file is refused).
bool reread_record(int fd, std::uint64_t uuid_hash, PeerRecord* out) {
  unsigned char bytes[sizeof(PeerRecord) + 1];
  ssize_t got = -1;
  do {
    got = ::pread(fd, bytes, sizeof bytes, 0);
  } while (got < 0 && errno == EINTR);
  if (got < 0) return false;
  return detail::peer_record_from_bytes(bytes, static_cast<std::size_t>(got), uuid_hash, out);
}

void copy_peer(const PeerRecord& record, PeerState* peer) {
  peer->container_key = record.container_key;
  peer->compute_limit_percent = record.compute_limit_percent;
  peer->priority = static_cast<Priority>(record.priority);
  peer->heartbeat_ns = record.heartbeat_ns;
  peer->busy_until_ns = record.busy_until_ns;
  peer->held_back_ns = record.held_back_ns;
  peer->device_share_permille = record.device_share_permille > 1000 ? 1000 : record.device_share_permille;
  peer->busy_period_us = record.busy_period_us;
}

}  // namespace

void apply_assignment(const Assignment& assigned, PeerState* peer) {
  peer->priority = lower_priority(peer->priority, assigned.priority);
  peer->compute_limit_percent = assigned.compute_percent == 0 ? 0
                                : peer->compute_limit_percent == 0
                                    ? assigned.compute_percent
                                    : std::min(peer->compute_limit_percent, assigned.compute_percent);
}

Assignment::State NodeChannel::read_assignment_text(int node_fd, const char* writer, char* text,
                                                    std::size_t* size) {
  *size = 0;
  char name[300];
  const int length = std::snprintf(name, sizeof name, "%s.assigned", writer);
  if (length <= 0 || static_cast<std::size_t>(length) >= sizeof name) return Assignment::State::None;
  struct stat dir_st {};
  struct stat entry {};
  if (::fstat(node_fd, &dir_st) != 0) return Assignment::State::Refused;
  if (::fstatat(node_fd, name, &entry, AT_SYMLINK_NOFOLLOW) != 0)
    return errno == ENOENT ? Assignment::State::None : Assignment::State::Refused;
  // Only the operator (root, or whoever owns the node directory) writes it; a name anyone else
  // created in a shared directory is nobody's assignment.
  const auto operators = [&dir_st](const struct stat& st) {
    return st.st_uid == 0 || st.st_uid == dir_st.st_uid;
  };
  if (!operators(entry)) return Assignment::State::None;
  fs::UniqueFd fd(fs::open_in_dir_raw(node_fd, name, O_RDONLY | O_NONBLOCK));
  if (fd.get() < 0) return Assignment::State::Refused;
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !operators(st) || !S_ISREG(st.st_mode) ||
      (st.st_mode & (S_IWGRP | S_IWOTH)) != 0 || st.st_size < 0 ||
      static_cast<std::size_t>(st.st_size) > kMaxAssignmentBytes) {
    return Assignment::State::Refused;
  }
  const auto bytes = static_cast<std::size_t>(st.st_size);
  if (!fs::pread_exact(fd.get(), text, bytes, 0)) return Assignment::State::Refused;
  *size = bytes;
  return Assignment::State::Believed;
}

Assignment NodeChannel::read_assignment(int node_fd, const char* writer, std::string_view uuid,
                                        AssignmentSyntaxError* error) {
  char text[kMaxAssignmentBytes];
  std::size_t size = 0;
  switch (read_assignment_text(node_fd, writer, text, &size)) {
    case Assignment::State::None:
      return Assignment{};
    case Assignment::State::Refused: {
      if (error != nullptr) *error = {0, "the file cannot be read as the operator's (type, mode, size)"};
      Assignment refused;
      refused.state = Assignment::State::Refused;
      refused.priority = Priority::Low;
      return refused;
    }
    case Assignment::State::Believed:
      break;
  }
  return assignment_for_gpu(std::string_view(text, size), uuid, error);
}

bool NodeChannel::read_assignment(int node_fd, const char* writer, std::string_view uuid, Assignment* out) {
  *out = read_assignment(node_fd, writer, uuid);
  return out->state == Assignment::State::Believed;
}

NodeChannel::NodeChannel(std::string node_dir, std::string writer, std::string uuid, std::uint64_t key,
                         int fd, std::string record_path, NodeDirKind kind)
    : node_dir_(std::move(node_dir)),
      writer_(std::move(writer)),
      uuid_(std::move(uuid)),
      uuid_hash_(detail::uuid_hash(uuid_)),
      key_(key),
      fd_(fd),
      record_path_(std::move(record_path)),
      kind_(kind),
      cache_(std::make_unique<WriterCache>()) {}

void NodeChannel::forget(KnownSet& set) {
  for (std::size_t i = 0; i < set.count; ++i) {
    const KnownPeer& known = set.peers[i];
    struct stat st {};
    if (::fstat(known.fd, &st) == 0 && static_cast<std::uint64_t>(st.st_dev) == known.device &&
        static_cast<std::uint64_t>(st.st_ino) == known.inode) {
      ::close(known.fd);
    }
  }
  set.count = 0;
}

Result<std::unique_ptr<NodeChannel>> NodeChannel::open(const std::string& node_dir, std::string_view gpu_uuid,
                                                       std::uint64_t container_key, std::string_view writer,
                                                       NodeDirKind kind) {
  if (container_key == 0) return make_error("the node channel needs a container key");
  if (!text::is_plain_name(gpu_uuid))
    return make_error("GPU UUID '" + std::string(gpu_uuid) + "' is not a file name");
  std::string writer_name = writer.empty() ? "uid-" + std::to_string(::geteuid()) : std::string(writer);
  if (!text::is_plain_name(writer_name))
    return make_error("node channel writer '" + writer_name + "' is not a file name");
  // Created private if missing (0755: only we add writer directories, peers of ours read them); a
  // directory users share is the operator's to make (01777), never the library's.
  if (::mkdir(node_dir.c_str(), 0755) == 0) (void)::chmod(node_dir.c_str(), 0755);
  // Whoever controls the node directory can remove or replace every writer directory in it: it must
  // be ours or root's, and writable by others only with the sticky bit.
  auto node_fd = fs::open_dir(node_dir, fs::DirTrust::SharedSticky);
  if (!node_fd) return make_error("node channel directory refused: " + node_fd.error());
  fs::UniqueFd node_guard(*node_fd);
  if (kind == NodeDirKind::Private) {
    // A per-user default: another user's directory there would be believed by nobody (see
    // trusted_writer), and one of ours that an older library made 01777 is made private again.
    struct stat st {};
    if (::fstat(*node_fd, &st) != 0) return make_error(node_dir + ": cannot stat: " + fs::errno_text(errno));
    if (st.st_uid != ::geteuid())
      return make_error(node_dir + ": this user's private node directory is owned by uid " +
                        std::to_string(st.st_uid) + "; refusing it (remove it, or set GPUSLICE_NODE_DIR)");
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && ::fchmod(*node_fd, 0755) != 0)
      return make_error(node_dir + ": cannot make it private: " + fs::errno_text(errno));
  }
  auto writer_fd = open_writer_dir(*node_fd, node_dir, writer_name);
  if (!writer_fd) return make_error(writer_fd.error());
  fs::UniqueFd writer_guard(*writer_fd);

  std::string name = record_name(gpu_uuid, container_key);
  std::string path = node_dir + "/" + writer_name + "/" + name;
  // Readable by every peer, writable only by us.
  auto fd = fs::open_in_dir(*writer_fd, name.c_str(), O_RDWR | O_CREAT, 0644);
  if (!fd) return make_error(node_dir + "/" + writer_name + "/" + fd.error());
  fs::UniqueFd record_guard(*fd);
  struct stat st {};
  if (::fstat(*fd, &st) != 0) return make_error(path + ": cannot stat: " + fs::errno_text(errno));
  if (st.st_uid != ::geteuid()) {
    return make_error(path + ": owned by uid " + std::to_string(st.st_uid) +
                      ", not us; refusing to write it");
  }
  // Readable by peers whatever our umask.
  if ((st.st_mode & 0777) != 0644) (void)::fchmod(*fd, 0644);
  if (static_cast<std::size_t>(st.st_size) != sizeof(PeerRecord) &&
      ::ftruncate(*fd, static_cast<off_t>(sizeof(PeerRecord))) != 0) {
    return make_error(path + ": cannot size the record: " + fs::errno_text(errno));
  }
  remove_abandoned_records(*writer_fd, name);
  return std::unique_ptr<NodeChannel>(new NodeChannel(node_dir, writer_name, std::string(gpu_uuid),
                                                      container_key, record_guard.release(), path, kind));
}

bool NodeChannel::publish(const PeerState& own) {
  PeerRecord record{};
  std::memcpy(record.magic, PeerRecord::kMagic, sizeof record.magic);
  record.version = PeerRecord::kVersion;
  record.size = sizeof(PeerRecord);
  record.sequence = sequence_.fetch_add(1, std::memory_order_relaxed) + 1;
  record.container_key = key_;
  record.uuid_hash = uuid_hash_;
  record.compute_limit_percent = own.compute_limit_percent > 100 ? 100 : own.compute_limit_percent;
  record.priority = static_cast<std::uint32_t>(own.priority);
  record.heartbeat_ns = own.heartbeat_ns != 0 ? own.heartbeat_ns : monotonic_ns();
  record.busy_until_ns = own.busy_until_ns;
  record.held_back_ns = own.held_back_ns;
  record.device_share_permille = own.device_share_permille > 1000 ? 1000 : own.device_share_permille;
  record.busy_period_us = own.busy_period_us;
  record.checksum = detail::peer_checksum(record);
  return fs::pwrite_exact(fd_, &record, sizeof record, 0);
}

// Not ours, and a heartbeat within stale_ns of now: one from after now_ns was published while we
// read; one far ahead is bogus.
bool NodeChannel::fresh_peer(const void* raw, std::uint64_t now_ns, std::uint64_t stale_ns) const {
  const auto& record = *static_cast<const PeerRecord*>(raw);
  if (record.container_key == key_) return false;
  return layout::heartbeat_distance_ns(record.heartbeat_ns, now_ns) < stale_ns;
}

std::size_t NodeChannel::read_peers(PeerState* out, std::size_t capacity, std::uint64_t now_ns,
                                    std::uint64_t stale_ns) const {
  return scan(out, capacity, now_ns, stale_ns, std::nullopt, nullptr, nullptr);
}

std::size_t NodeChannel::scan_peers(PeerState* out, std::size_t capacity, std::uint64_t now_ns,
                                    std::uint64_t stale_ns, std::optional<Priority> above) {
  KnownPeer found[kMaxKnownPeers];
  std::size_t kept = 0;
  const std::size_t count = scan(out, capacity, now_ns, stale_ns, above, found, &kept);
  // The set not in use may still be read by a reader that took it before the last switch: wait for
  // it (a re-read is a few preads), then replace it and switch.
  const int next = 1 - active_known_.load();
  while (known_readers_.load() != 0) sched_yield();
  KnownSet& set = known_[next];
  forget(set);
  for (std::size_t i = 0; i < kept; ++i) set.peers[i] = found[i];
  set.count = kept;
  active_known_.store(next);
  return count;
}

std::size_t NodeChannel::read_known_peers(PeerState* out, std::size_t capacity, std::uint64_t now_ns,
                                          std::uint64_t stale_ns, Priority above) const {
  std::size_t count = 0;
  // Sequentially consistent with the scan's switch: a set is replaced only when no reader is in it.
  known_readers_.fetch_add(1);
  const KnownSet& set = known_[active_known_.load()];
  for (std::size_t i = 0; i < set.count && count < capacity; ++i) {
    const KnownPeer& known = set.peers[i];
    if (priority_value(known.priority) <= priority_value(above)) continue;
    PeerRecord record;
    // Each kept file is one record of one writer directory: nothing to deduplicate.
    if (!reread_record(known.fd, uuid_hash_, &record) || record.container_key != known.key ||
        !fresh_peer(&record, now_ns, stale_ns)) {
      continue;
    }
    copy_peer(record, &out[count]);
    apply_assignment(known.assigned, &out[count++]);
  }
  known_readers_.fetch_sub(1);
  return count;
}

void NodeChannel::set_listing_budget(const ListingBudget& budget) {
  WriterCache& cache = *cache_;
  cache.budget = budget;
  cache.entry_credit = static_cast<std::int64_t>(budget.entries_per_second);
  cache.ns_credit = static_cast<std::int64_t>(budget.ns_per_second);
  cache.credited_at_ns = monotonic_ns();
}

namespace {

// Whether `fd` is still the directory (device, inode) it was opened on: the application may have
// closed the number and reused it for something else.
bool opened_on(int fd, std::uint64_t device, std::uint64_t inode) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 && static_cast<std::uint64_t>(st.st_dev) == device &&
         static_cast<std::uint64_t>(st.st_ino) == inode;
}

}  // namespace

bool NodeChannel::index_believed(int node_fd, const struct stat& node_st, std::uint64_t wall_ns,
                                 WriterCache& cache) const {
  // Said once per process and kind: each channel of each process would say the same.
  static std::atomic<bool> said_untrusted{false};
  static std::atomic<bool> said_stale{false};
  WriterIndexStamp stamp;
  if (!writer_index_stamp(node_fd, &stamp)) {
    cache.index_read = false;
    cache.index_state = WriterIndexState::Absent;
    return false;
  }
  if (!cache.index_read || !(stamp == cache.index_stamp)) {
    const char* why = "";
    cache.index_state =
        read_writer_index(node_fd, node_st, wall_ns, cache.index_text, &cache.index_size, &why);
    cache.index_stamp = stamp;
    cache.index_read = true;
    index_reads_.fetch_add(1, std::memory_order_relaxed);
    if (cache.index_state == WriterIndexState::Untrusted && !said_untrusted.exchange(true)) {
      GS_LOG(Warn, "%s/%s is not the operator's writer index (%s): listing the node directory instead",
             node_dir_.c_str(), kWriterIndexName, why);
    }
  } else if (cache.index_state == WriterIndexState::Believed &&
             !writer_index_fresh(stamp.mtime_ns, wall_ns)) {
    cache.index_state = WriterIndexState::Stale;
  }
  if (cache.index_state == WriterIndexState::Stale && !said_stale.exchange(true)) {
    GS_LOG(Warn,
           "%s/%s was not rewritten for %llu s (is gpuslice-node index running?): listing the node "
           "directory instead",
           node_dir_.c_str(), kWriterIndexName,
           static_cast<unsigned long long>(kWriterIndexFreshNs / 1'000'000'000ULL));
  }
  return cache.index_state == WriterIndexState::Believed;
}

// The pass in progress is given up: its descriptor closed when it is still ours (the application
// may have closed it and reused the number; a child of a fork closes only its own copy).
void NodeChannel::end_pass(WriterCache& cache) const {
  if (cache.fd >= 0 && opened_on(cache.fd, cache.pass_stamp.device, cache.pass_stamp.inode))
    ::close(cache.fd);
  cache.fd = -1;
  cache.filled = cache.position = 0;
}

NodeChannel::~NodeChannel() {
  end_pass(*cache_);
  forget(known_[0]);
  forget(known_[1]);
  ::close(fd_);
}

// One look at the node directory, bounded: kMaxWriters trusted writer directories,
// kMaxEntriesPerWriter entries and kMaxRecordsPerWriter records of each, and what the listing
// budget allows of the pass over the node directory in progress (see kListEntriesPerSecond). A
// file others planted costs one listing entry, a directory one fstatat before anything is opened,
// once per pass, and passes run only while the directory keeps changing. No allocation: the
// listings go through buffers of the stack or of the cache.
std::size_t NodeChannel::scan(PeerState* out, std::size_t capacity, std::uint64_t now_ns,
                              std::uint64_t stale_ns, std::optional<Priority> above, KnownPeer* keep,
                              std::size_t* kept) const {
  if (capacity == 0) return 0;
  const int node_fd = fs::open_dir_raw(node_dir_.c_str(), fs::DirTrust::SharedSticky);
  if (node_fd < 0) return 0;
  fs::UniqueFd node_guard(node_fd);
  const uid_t self = ::geteuid();
  struct stat node_st {};
  if (::fstat(node_fd, &node_st) != 0) return 0;
  std::size_t count = 0;
  std::size_t writers = 0;
  const bool cache_ours = !cache_busy_.exchange(true, std::memory_order_acquire);
  const auto stamp = [](const struct stat& st) {
    return WriterCache::Stamp{static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
                              static_cast<std::uint64_t>(st.st_mtim.tv_sec) * 1'000'000'000ULL +
                                  static_cast<std::uint64_t>(st.st_mtim.tv_nsec),
                              static_cast<std::uint64_t>(st.st_ctim.tv_sec) * 1'000'000'000ULL +
                                  static_cast<std::uint64_t>(st.st_ctim.tv_nsec)};
  };
  const WriterCache::Stamp now_stamp = stamp(node_st);
  WriterCache& cache = *cache_;
  // A directory changed within the last second may still change within the same time stamp (its
  // clock is coarse): a pass that began then is not believed to have seen it all.
  timespec wall{};
  clock_gettime(CLOCK_REALTIME, &wall);
  const std::uint64_t wall_ns =
      static_cast<std::uint64_t>(wall.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(wall.tv_nsec);
  const bool quiet = wall_ns > std::max(now_stamp.mtime_ns, now_stamp.ctime_ns) + 1'000'000'000ULL;
  // The operator's index of writers, where it is believed, stands for the listing.
  const bool indexed =
      cache_ours && kind_ == NodeDirKind::Shared && index_believed(node_fd, node_st, wall_ns, cache);

  // The pass in progress goes on only on the descriptor this process opened of this directory.
  bool listing = false;  // this scan lists (else it visits the writers it knows)
  bool budgeted = false;
  int list_fd = node_fd;
  alignas(8) char own_buffer[4096];
  std::size_t own_filled = 0, own_position = 0;
  char* buffer = own_buffer;
  std::size_t* filled = &own_filled;
  std::size_t* position = &own_position;
  if (cache_ours) {
    if (cache.fd >= 0) {
      const WriterCache::Stamp& opened = cache.pass_stamp;
      const bool ours = cache.pid == ::getpid() && opened_on(cache.fd, opened.device, opened.inode) &&
                        opened.device == now_stamp.device && opened.inode == now_stamp.inode;
      if (!ours) {
        // Forked, replaced or closed under us: a new pass, keeping the writers found so far.
        end_pass(cache);
      }
    }
    const bool unchanged = cache.valid && cache.stamp == now_stamp;
    if (indexed) {
      end_pass(cache);  // nothing is listed while the index stands
    } else if (cache.fd < 0 && !unchanged) {
      // A new pass, on this scan's descriptor (kept open for the next scans).
      cache.fd = node_guard.release();
      cache.pid = ::getpid();
      cache.filled = cache.position = 0;
      cache.pass_stamp = now_stamp;
      cache.pass_quiet = quiet;
    }
    if (cache.fd >= 0) {
      listing = true;
      list_fd = cache.fd;
      buffer = cache.buffer;
      filled = &cache.filled;
      position = &cache.position;
      budgeted = cache.listed_once;
    }
    // The budget accrues with time, one second's worth at most.
    const std::uint64_t now = monotonic_ns();
    const std::uint64_t since = now - std::min(now, cache.credited_at_ns);
    cache.credited_at_ns = now;
    const auto accrue = [since](std::int64_t credit, std::uint64_t per_second) {
      const auto cap = static_cast<std::int64_t>(per_second);
      if (since >= 1'000'000'000ULL) return cap;
      return std::min(cap, credit + static_cast<std::int64_t>(since * per_second / 1'000'000'000ULL));
    };
    cache.entry_credit = accrue(cache.entry_credit, cache.budget.entries_per_second);
    cache.ns_credit = accrue(cache.ns_credit, cache.budget.ns_per_second);
  } else {
    listing = true;  // another thread has the cache: a whole listing of its own, not kept
  }
  const std::size_t buffer_size = sizeof own_buffer;
  static_assert(sizeof own_buffer == sizeof WriterCache::buffer);
  DirListing node_listing(list_fd, buffer, buffer_size, filled, position);
  const auto in_fresh = [&](const char* name) {
    for (std::size_t i = 0; i < cache.found && i < WriterCache::kWriters; ++i) {
      if (std::strcmp(cache.fresh[i], name) == 0) return true;
    }
    return false;
  };

  // Visits one writer directory: its assignment and its records of this GPU.
  const auto visit = [&](const char* name) {
    struct stat listed_st {};
    if (::fstatat(node_fd, name, &listed_st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !writer_trusted(name, listed_st, self, node_st)) {
      return;
    }
    const int writer_fd = ::openat(node_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (writer_fd < 0) return;
    fs::UniqueFd writer_guard(writer_fd);
    // The directory opened must be the one checked (it may have been swapped in between).
    struct stat opened_st {};
    if (::fstat(writer_fd, &opened_st) != 0 || opened_st.st_dev != listed_st.st_dev ||
        opened_st.st_ino != listed_st.st_ino || !writer_trusted(name, opened_st, self, node_st)) {
      return;
    }
    const Assignment assigned = read_assignment(node_fd, name, uuid_);
    ++writers;
    alignas(8) char records_buffer[2048];
    DirListing records(writer_fd, records_buffer, sizeof records_buffer);
    DirListing::Entry entry;
    std::size_t examined = 0;
    std::size_t matched = 0;
    while (count < capacity && examined < kMaxEntriesPerWriter && matched < kMaxRecordsPerWriter &&
           records.next(&entry)) {
      ++examined;
      std::uint64_t key = 0;
      if (!record_key(entry.name, uuid_, &key)) continue;
      ++matched;
      if (entry.type != DT_REG && entry.type != DT_UNKNOWN) continue;
      PeerRecord record;
      struct stat identity {};
      fs::UniqueFd fd(open_record(writer_fd, entry.name, uuid_hash_, &record, &identity));
      // The key inside must be the one the name carries. Names are unique in a directory, so a
      // writer has one record per key; a copy of another container's key in another writer
      // directory is listed beside the original, never instead of it.
      if (fd.get() < 0 || record.container_key != key || !fresh_peer(&record, now_ns, stale_ns)) continue;
      PeerState& peer = out[count];
      copy_peer(record, &peer);
      apply_assignment(assigned, &peer);
      if (above && priority_value(peer.priority) <= priority_value(*above)) continue;
      ++count;
      if (keep != nullptr && *kept < kMaxKnownPeers) {
        KnownPeer& known = keep[(*kept)++];
        known.fd = fd.release();
        known.priority = peer.priority;
        known.assigned = assigned;
        known.device = static_cast<std::uint64_t>(identity.st_dev);
        known.inode = static_cast<std::uint64_t>(identity.st_ino);
        known.key = key;
      }
    }
  };
  const auto full = [&] { return count >= capacity || writers >= kMaxWriters; };

  // The listing, as far as the budget goes: the trusted writers it finds are remembered and
  // visited below with the others (visited at once when more than kWriters were found).
  bool pass_done = false;
  if (listing) {
    const std::uint64_t list_started = monotonic_ns();
    std::uint64_t listed = 0;
    DirListing::Entry writer;
    while (!full()) {
      if (budgeted) {
        if (static_cast<std::int64_t>(listed) >= cache.entry_credit || cache.ns_credit <= 0) break;
        if (listed % 32 == 31 && static_cast<std::int64_t>(monotonic_ns() - list_started) >= cache.ns_credit)
          break;
      }
      if (!node_listing.next(&writer)) {
        pass_done = true;
        break;
      }
      ++listed;
      entries_listed_.fetch_add(1, std::memory_order_relaxed);
      if (writer.name[0] == '.' || (writer.type != DT_DIR && writer.type != DT_UNKNOWN)) continue;
      struct stat listed_st {};
      if (::fstatat(node_fd, writer.name, &listed_st, AT_SYMLINK_NOFOLLOW) != 0 ||
          !writer_trusted(writer.name, listed_st, self, node_st)) {
        continue;
      }
      if (cache_ours) {
        if (in_fresh(writer.name)) continue;
        const std::size_t length = std::strlen(writer.name);
        if (cache.found < WriterCache::kWriters && length < sizeof cache.fresh[0]) {
          std::memcpy(cache.fresh[cache.found++], writer.name, length + 1);
          continue;
        }
        cache.found = WriterCache::kWriters + 1;  // too many to keep: the next pass lists all
      }
      visit(writer.name);
    }
    if (cache_ours && budgeted) {
      cache.entry_credit -= static_cast<std::int64_t>(listed);
      cache.ns_credit -= static_cast<std::int64_t>(monotonic_ns() - list_started);
    }
  }
  if (indexed) {
    // The writers the index names, then our own writer when it does not (one the index leaves out
    // because only its own user believes it).
    bool own_indexed = false;
    auto visit_indexed = [&](std::string_view name) {
      if (name == writer_) own_indexed = true;
      char copy[130];
      if (full() || name.size() >= sizeof copy) return;
      std::memcpy(copy, name.data(), name.size());
      copy[name.size()] = '\0';
      visit(copy);
    };
    for_each_indexed_writer(
        std::string_view(cache.index_text, cache.index_size),
        [](void* context, std::string_view name) { (*static_cast<decltype(visit_indexed)*>(context))(name); },
        &visit_indexed);
    if (!own_indexed && !full()) visit(writer_.c_str());
    indexed_scans_.fetch_add(1, std::memory_order_relaxed);
    cache_busy_.store(false, std::memory_order_release);
  } else if (cache_ours) {
    // The writers of the pass in progress, then those of the last complete one it has not found.
    const std::size_t found = std::min(cache.found, WriterCache::kWriters);
    for (std::size_t i = 0; i < found && !full(); ++i) visit(cache.fresh[i]);
    for (std::size_t i = 0; i < cache.count && !full(); ++i) {
      if (!in_fresh(cache.names[i])) visit(cache.names[i]);
    }
    if (pass_done) {
      // One with more writers than fit, or of a directory that changed within the second of its
      // start, is not believed for the next scan: another pass follows.
      const bool fits = cache.found <= WriterCache::kWriters;
      for (std::size_t i = 0; fits && i < cache.found; ++i)
        std::memcpy(cache.names[i], cache.fresh[i], sizeof cache.names[i]);
      cache.valid = fits && cache.pass_quiet;
      cache.listed_once = fits;
      cache.count = fits ? cache.found : 0;
      cache.stamp = cache.pass_stamp;
      cache.found = 0;
      end_pass(cache);
    }
    cache_busy_.store(false, std::memory_order_release);
  }
  return count;
}

}  // namespace gpuslice::shm
