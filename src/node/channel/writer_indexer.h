// Keeps the index of writer directories of a node directory users share
// (<node dir>/.writers, shared_state/writer_index.h), so that the node channel's readers in every
// container visit the writers by name instead of listing a directory any local user can fill with
// junk: a flood then costs this one process, not every tenant's.
//
// It learns of writer directories from inotify on the node directory (a directory created, removed,
// renamed or changed in owner or mode is looked at again; a queue overflow means a whole relisting,
// at most once per `min_relist_gap`) and from a whole relisting every `relist` as a safety net. It
// names every writer directory that every reader believes (uid-N owned by N, any other name owned by
// root), with an assignment or without one: a container at `normal` with no assignment holds a
// `low` one too. It rewrites the index (a temporary file in the same directory, then a rename) when
// that set changes and at least every `refresh`, so readers, which believe an index rewritten within
// shm::kWriterIndexFreshNs, fall back to listing on their own when this process is gone. A set whose
// index would pass shm::kMaxWriterIndexBytes is not indexed (the file is removed: readers list).
#pragma once

#include <sys/stat.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>

#include "common/result.h"

namespace gpuslice::node {

class WriterIndexer {
 public:
  struct Options {
    std::string node_dir;
    std::chrono::milliseconds refresh{10'000};
    std::chrono::milliseconds relist{60'000};
    std::chrono::milliseconds min_relist_gap{1'000};
  };

  // Opens the node directory (root's or ours, writable by others only with the sticky bit), watches
  // it, lists it and writes the index.
  static Result<std::unique_ptr<WriterIndexer>> open(const Options& options);
  ~WriterIndexer();
  WriterIndexer(const WriterIndexer&) = delete;
  WriterIndexer& operator=(const WriterIndexer&) = delete;

  // Waits up to `timeout` for changes, handles what arrived (at most about a megabyte of events, so
  // that a flood of them cannot stall the rest), relists and rewrites the index as due.
  void step(std::chrono::milliseconds timeout);
  // Removes the index (a clean stop: readers list at once instead of waiting for it to go stale).
  void remove_index();

  const std::set<std::string, std::less<>>& writers() const { return writers_; }
  std::uint64_t listings() const { return listings_; }    // whole listings of the node directory
  std::uint64_t index_writes() const { return writes_; }  // index files written
  std::uint64_t overflows() const { return overflows_; }  // inotify queue overflows seen

 private:
  WriterIndexer(Options options, int node_fd, int inotify_fd);
  bool watch();
  bool reopen();
  void relist();
  void recheck(const char* name, const struct stat& node_st);
  void write_index();
  std::size_t handle_events(const struct stat& node_st);  // how many events it read

  Options options_;
  int node_fd_ = -1;
  int inotify_fd_ = -1;
  int watch_ = -1;            // the watch of node_fd_
  bool lost_ = false;         // the node directory was removed or moved: watch it again
  bool need_relist_ = false;  // events were lost
  bool dirty_ = true;         // the index is not what the set says
  bool said_too_long_ = false;
  std::set<std::string, std::less<>> writers_;
  std::chrono::steady_clock::time_point listed_at_{};
  std::chrono::steady_clock::time_point written_at_{};
  std::uint64_t listings_ = 0, writes_ = 0, overflows_ = 0;
  unsigned temp_counter_ = 0;
};

}  // namespace gpuslice::node
