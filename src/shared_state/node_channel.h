// The node-wide channel between containers sharing a GPU (compute-limit turns, priority sharing).
//
// Every container writes only its own record file; everyone else only reads it. Layout:
//   <node dir>/<writer>/<gpu uuid>.<container key, 16 hex digits>
// where <writer> is a directory only that writer can change: on Kubernetes the device plugin mounts
// <root>/channel read-only into each container and the container's own <root>/channel/<id> read-write
// over it (GPUSLICE_NODE_WRITER=<id>); on a plain host it is "uid-<uid>", created 0755 by its user.
// A record is a fixed-size, checksummed struct written with one pwrite; readers pread it into a local
// copy, check kind, size, magic, checksum, GPU and freshness, and skip anything else. No mapping of a
// file another tenant can write, so a hostile writer can at worst publish false numbers about itself.
//
// What a writer may claim is bounded by what the operator assigned it, in a file beside (not
// inside) its directory that the writer cannot change:
//   <node dir>/<writer>.assigned    e.g. "priority=high\ncompute=30\n" (compute.<gpu uuid>=N per GPU)
// believed only when owned by root or by the node directory's owner and writable by nobody else (the
// device plugin writes it on Kubernetes; on a plain host the operator does). Readers take the lower
// of the claimed and the assigned level (no file: normal), and a compute share only when one is
// assigned (the lower of the two), so no record a tenant writes can raise its level or take a turn.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/priority.h"
#include "common/result.h"
#include "shared_state/assignment_text.h"
#include "shared_state/writer_index.h"

namespace gpuslice::shm {

// `assigned` applied to what a record claims (the level and share readers believe).
struct PeerState;
void apply_assignment(const Assignment& assigned, PeerState* peer);

struct PeerState {                          // what one container publishes about itself on one GPU
  std::uint64_t container_key = 0;          // identity of the container (its ledger file); set by the channel
  std::uint32_t compute_limit_percent = 0;  // 0 = none
  Priority priority = Priority::Normal;
  std::uint64_t heartbeat_ns = 0;  // CLOCK_MONOTONIC of the last publish (0: publish() stamps it)
  // Priority: work queued/running at least until this time; a time already past: idle since then;
  // 0 = never busy.
  std::uint64_t busy_until_ns = 0;
  std::uint64_t held_back_ns = 0;  // priority: total time this container's submissions were held back
  // Priority: the share of its busy time the device ran its work, per mille (0 = not measured).
  std::uint32_t device_share_permille = 0;
  // Priority: the mean length of its busy periods (a server's request), microseconds (0 = unknown).
  std::uint32_t busy_period_us = 0;
};

// A node directory the operator made for users to share, or one user's private default
// (GPUSLICE_NODE_DIR unset): that one must be the user's own, and is kept writable by it alone.
enum class NodeDirKind { Shared, Private };

class NodeChannel {
 public:
  // The work of one scan is bounded by what is believed, not by what anyone can create: trusted
  // writer directories (kMaxWriters; stale ones go with their allocation), entries examined and
  // records read in each, and a budget for listing the node directory. Entries of the node
  // directory that are no writer directory cost one listing entry each (only a user of the host
  // can create them; a container's mount of it is read-only) and are listed in passes: a pass
  // starts when the directory changed (its mtime or ctime) since the last complete one, and goes
  // on where the last scan stopped (its own descriptor of the directory, kept across scans), so
  // a scan lists at most what the budget has accrued: kListEntriesPerSecond entries and
  // kListNsPerSecond of listing a second, at most one second's worth at once. Every scan visits
  // by name the writers the last complete pass and the pass in progress found. The first pass of
  // a channel goes to the end whatever it costs (a writer is never hidden for lack of one), and
  // so does every pass while the last complete one found more writers than a scan remembers
  // (kWriters: only the operator or that many users can make them). A new writer is found by the
  // pass after the one in progress when it appeared: at the next scan in a directory a pass lists
  // at once (up to kListEntriesPerSecond entries), within two passes of directory size /
  // kListEntriesPerSecond (or of its listing time / kListNsPerSecond) in a bigger one that keeps
  // changing: a pass of 100,000 entries takes 12-14 s at 0.25-0.3 µs an entry, longer on a
  // loaded machine (24.6 s measured to find one writer on a loaded 2-core machine).
  // Unless the operator keeps an index of the writers (writer_index.h): in a shared node directory
  // whose .writers is believed, a scan lists nothing; it re-reads the index when the file changed
  // and visits the writers it names (and the channel's own writer) by name. An index that is not
  // the operator's, malformed or stale is said once in the log and listing resumes as above. A
  // private node directory (NodeDirKind::Private) is always listed: only its owner can fill it.
  static constexpr std::size_t kMaxWriters = 4096;
  static constexpr std::uint64_t kListEntriesPerSecond = 8192;
  static constexpr std::uint64_t kListNsPerSecond = 2'000'000;
  struct ListingBudget {
    std::uint64_t entries_per_second = kListEntriesPerSecond;
    std::uint64_t ns_per_second = kListNsPerSecond;
  };
  // Replaces the budget (tests, benchmarks) and fills it; from the scanning thread.
  void set_listing_budget(const ListingBudget& budget);
  static constexpr std::size_t kMaxEntriesPerWriter = 256;
  static constexpr std::size_t kMaxRecordsPerWriter = 16;

  // node_dir: GPUSLICE_NODE_DIR (or what the device plugin mounts): ours or root's, writable by others
  // only with the sticky bit; created 0755 (private) when missing. Readers of a directory nobody but
  // its owner can write believe only the owner's (and root's) writer directories. Creates/opens this
  // container's own record for the GPU in <node_dir>/<writer> (writer: GPUSLICE_NODE_WRITER through
  // config::Settings; "uid-<euid>" when empty); never follows symlinks; refuses a writer directory another
  // user controls. Readers believe a writer directory "uid-N" only when uid N owns it, any other only when
  // root (the device plugin) or the reader itself owns it.
  static Result<std::unique_ptr<NodeChannel>> open(const std::string& node_dir, std::string_view gpu_uuid,
                                                   std::uint64_t container_key, std::string_view writer = {},
                                                   NodeDirKind kind = NodeDirKind::Shared);
  ~NodeChannel();
  NodeChannel(const NodeChannel&) = delete;
  NodeChannel& operator=(const NodeChannel&) = delete;

  // One pwrite of a fixed-size checksummed record; lock-free, no allocation, safe from any thread.
  bool publish(const PeerState& own);

  // Validated records of the OTHER containers on this GPU refreshed within stale_ns; at most `capacity`.
  // A scan of the node directory: a listing per writer and an open per record.
  std::size_t read_peers(PeerState* out, std::size_t capacity, std::uint64_t now_ns,
                         std::uint64_t stale_ns = 2'000'000'000ULL) const;

  // read_peers() that also keeps the record files it read open (at most kMaxKnownPeers), for
  // read_known_peers() to re-read without listing or opening anything. One thread at a time (in
  // the library the watcher, so no launching thread pays for a listing); read_known_peers() may
  // run beside it on another thread: the kept files are published as a whole set, and a set is
  // closed only once no reader is in it.
  // With `above`, only records believed above that level are returned (and kept): records at or
  // below the reader's own level, however many, cannot fill `capacity` in front of a higher one.
  std::size_t scan_peers(PeerState* out, std::size_t capacity, std::uint64_t now_ns, std::uint64_t stale_ns,
                         std::optional<Priority> above = std::nullopt);
  // The records of the files the last scan_peers() kept whose priority then was above `above`:
  // one pread each into a local copy, validated as by read_peers(). A record replaced since (by a
  // symbolic link, a FIFO, another file) is still the old file here and turns stale; the next
  // scan opens what is there now, with the same checks. No allocation, no lock. One thread at a time.
  std::size_t read_known_peers(PeerState* out, std::size_t capacity, std::uint64_t now_ns,
                               std::uint64_t stale_ns, Priority above) const;
  static constexpr std::size_t kMaxKnownPeers = 64;

  const std::string& record_path() const { return record_path_; }
  // Entries of the node directory listed so far by this channel's scans (what a flood costs).
  // Counted as they are consumed: a scan that stops within what getdents64 returned goes on there.
  std::uint64_t entries_listed() const { return entries_listed_.load(std::memory_order_relaxed); }
  const std::string& node_dir() const { return node_dir_; }
  // Times a scan read the node directory's writer index (it does only when the file changed), and
  // scans that used it instead of listing.
  std::uint64_t index_reads() const { return index_reads_.load(std::memory_order_relaxed); }
  std::uint64_t indexed_scans() const { return indexed_scans_.load(std::memory_order_relaxed); }
  const std::string& writer() const { return writer_; }
  // Reads <writer>.assigned in the node directory `node_fd` into `text` (kMaxAssignmentBytes):
  // None when there is none or the operator did not write it (owned by another user: ignored, as
  // anyone may create a name in a shared directory); Refused when the operator's file cannot be
  // believed (not a regular file, writable by others, unreadable, too long); else Believed with
  // *size bytes read (the grammar is checked by assignment_for_gpu()). No allocation.
  static Assignment::State read_assignment_text(int node_fd, const char* writer, char* text,
                                                std::size_t* size);
  // read_assignment_text() then assignment_for_gpu(): the writer's assignment on `uuid`.
  static Assignment read_assignment(int node_fd, const char* writer, std::string_view uuid,
                                    AssignmentSyntaxError* error = nullptr);
  // The same, true only when Believed.
  static bool read_assignment(int node_fd, const char* writer, std::string_view uuid, Assignment* out);

 private:
  NodeChannel(std::string node_dir, std::string writer, std::string uuid, std::uint64_t key, int fd,
              std::string record_path, NodeDirKind kind);

  struct KnownPeer {
    int fd = -1;
    Priority priority = Priority::Normal;  // as believed at the scan (assignment applied)
    Assignment assigned;
    std::uint64_t device = 0;  // the file's identity, so that a descriptor the application closed
    std::uint64_t inode = 0;   // and reused for its own file is never closed by us
    std::uint64_t key = 0;     // the container key its name carries
  };
  std::size_t scan(PeerState* out, std::size_t capacity, std::uint64_t now_ns, std::uint64_t stale_ns,
                   std::optional<Priority> above, KnownPeer* keep, std::size_t* kept) const;
  bool fresh_peer(const void* record, std::uint64_t now_ns, std::uint64_t stale_ns) const;

  std::string node_dir_;
  std::string writer_;
  std::string uuid_;
  std::uint64_t uuid_hash_;
  std::uint64_t key_;
  int fd_;
  std::string record_path_;
  NodeDirKind kind_;
  std::atomic<std::uint64_t> sequence_{0};
  struct KnownSet {
    KnownPeer peers[kMaxKnownPeers];
    std::size_t count = 0;
  };
  void forget(KnownSet& set);
  // The trusted writer directories the last complete pass over the node directory found, and the
  // directory's identity and times then; the pass in progress; the listing budget (scans only; a
  // scan that finds it in use lists the whole directory on its own instead).
  struct WriterCache {
    static constexpr std::size_t kWriters = 64;
    struct Stamp {
      std::uint64_t device = 0, inode = 0, mtime_ns = 0, ctime_ns = 0;
      bool operator==(const Stamp&) const = default;
    };
    Stamp stamp;
    bool valid = false;        // the directory has not changed since that pass began
    bool listed_once = false;  // a complete pass whose writers fit is in names
    std::size_t count = 0;
    char names[kWriters][130] = {};
    // The pass in progress: its own descriptor of the node directory, whose position is where the
    // next scan goes on (opened by process `pid`: a child of a fork never reads the parent's), what
    // getdents64 returned that is not consumed yet, the directory's stamp when the pass began, and
    // the writers it found so far.
    int fd = -1;
    pid_t pid = 0;
    Stamp pass_stamp;  // also the identity of the directory `fd` was opened on
    bool pass_quiet = false;
    std::size_t filled = 0, position = 0;
    alignas(8) char buffer[4096] = {};
    std::size_t found = 0;
    char fresh[kWriters][130] = {};
    // What may be listed now (consumed by listing, refilled with time up to one second's worth).
    ListingBudget budget;
    std::int64_t entry_credit = static_cast<std::int64_t>(kListEntriesPerSecond);
    std::int64_t ns_credit = static_cast<std::int64_t>(kListNsPerSecond);
    std::uint64_t credited_at_ns = 0;
    // The operator's index of writers (writer_index.h): what the file was when last read, what
    // reading it found, and its text when believed.
    bool index_read = false;
    WriterIndexStamp index_stamp;
    WriterIndexState index_state = WriterIndexState::Absent;
    std::size_t index_size = 0;
    char index_text[kMaxWriterIndexBytes] = {};
  };
  void end_pass(WriterCache& cache) const;
  // Whether the node directory's writer index is believed now (re-read only when it changed).
  bool index_believed(int node_fd, const struct stat& node_st, std::uint64_t wall_ns,
                      WriterCache& cache) const;
  std::unique_ptr<WriterCache> cache_;
  mutable std::atomic<bool> cache_busy_{false};
  mutable std::atomic<std::uint64_t> entries_listed_{0};
  mutable std::atomic<std::uint64_t> index_reads_{0};
  mutable std::atomic<std::uint64_t> indexed_scans_{0};
  KnownSet known_[2];                 // the one read_known_peers() uses, and the next
  std::atomic<int> active_known_{0};  // which one
  mutable std::atomic<int> known_readers_{0};
};

}  // namespace gpuslice::shm
