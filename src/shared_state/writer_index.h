// The index of writer directories the operator keeps in a shared node directory, so that readers
// of the node channel (node_channel.h) visit the writers by name instead of listing a directory any
// local user can fill: <node dir>/.writers, kept by `gpuslice-node index` (node/channel/writer_indexer.h).
//
//   gpuslice-writer-index 1
//   <writer>          one per line, strictly ascending (bytewise), each a plain name (letters, digits,
//   ...               '-', '_', '.', not starting with '.', at most 128 characters)
//   end <count>       the number of names above, decimal; the file ends with this line's newline
//
// It names the writer directories every reader believes whoever it runs as (writer_trusted() with no
// reader of its own: uid-N owned by N, any other name owned by root), with or without an assignment.
// Readers believe it only when it is a regular file owned by root or by the node directory's owner,
// writable by nobody else, at most kMaxWriterIndexBytes, well-formed, and rewritten within
// kWriterIndexFreshNs (its keeper rewrites it every kWriterIndexRefreshNs and whenever the set
// changes); else they list the directory as without it. Allocation-free: compiled into the library.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace gpuslice::shm {

inline constexpr char kWriterIndexName[] = ".writers";
inline constexpr std::string_view kWriterIndexHeader = "gpuslice-writer-index 1\n";
inline constexpr std::size_t kMaxWriterIndexBytes = std::size_t{32} * 1024;
inline constexpr std::uint64_t kWriterIndexRefreshNs = 10'000'000'000ULL;
inline constexpr std::uint64_t kWriterIndexFreshNs = 30'000'000'000ULL;

// "uid-N" with N in canonical decimal: the writer directory of user N.
bool uid_writer_name(const char* name, uid_t* uid);

// Whether a directory is a writer directory a reader running as `reader` believes: one only its
// writer can change, owned as its name says (uid-N by uid N; any other name, as the device plugin
// makes them, by root, or by the reader's own uid). In a node directory nobody but its owner can add
// to (`node`), only the owner's and root's. kNoReader: what every reader believes.
inline constexpr uid_t kNoReader = static_cast<uid_t>(-1);
bool writer_trusted(const char* name, const struct stat& st, uid_t reader, const struct stat& node);

// Why an index text is refused (nullptr: it is well-formed, with *count names).
const char* writer_index_error(std::string_view text, std::size_t* count);

// The names of a well-formed index, in order: on_name(context, name) for each; nothing for a text
// writer_index_error() refuses.
void for_each_indexed_writer(std::string_view text, void (*on_name)(void* context, std::string_view name),
                             void* context);

// What reading <node dir>/.writers found.
enum class WriterIndexState {
  Absent,     // no such name
  Untrusted,  // not the operator's file: a link or not a regular file, another owner, writable by
              // others, too long, unreadable, or malformed
  Stale,      // the operator's, well-formed, but not rewritten within kWriterIndexFreshNs
  Believed,
};

// The identity and times of the index file as fstatat sees it: when they have not changed, what
// was read from it still stands (its keeper replaces it by a rename, or rewrites it in place).
struct WriterIndexStamp {
  std::uint64_t device = 0, inode = 0, size = 0, mtime_ns = 0, ctime_ns = 0;
  std::uint32_t mode = 0, uid = 0;
  bool operator==(const WriterIndexStamp&) const = default;
};

// fstatat(node_fd, ".writers") without following a link: false when there is none.
bool writer_index_stamp(int node_fd, WriterIndexStamp* stamp);

// Reads the index of the node directory `node_fd` (whose stat is `node`) into `text` (capacity
// kMaxWriterIndexBytes): Believed with *size bytes, or why not. `wall_ns` is CLOCK_REALTIME now.
// `why` (may be null) is set to a fixed text for Untrusted. No allocation.
WriterIndexState read_writer_index(int node_fd, const struct stat& node, std::uint64_t wall_ns, char* text,
                                   std::size_t* size, const char** why);

// Whether an index last changed at `mtime_ns` (CLOCK_REALTIME) is still fresh at `wall_ns`.
bool writer_index_fresh(std::uint64_t mtime_ns, std::uint64_t wall_ns);

}  // namespace gpuslice::shm
