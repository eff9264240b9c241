#include "node/channel/writer_indexer.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "common/errno_text.h"
#include "common/log.h"
#include "common/safe_file.h"
#include "shared_state/assignment_text.h"
#include "shared_state/writer_index.h"

namespace gpuslice::node {
namespace {

constexpr std::uint32_t kWatched = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB |
                                   IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_EXCL_UNLINK;
constexpr std::size_t kEventBytesPerStep = 1 << 20;
// Well under the time a flood takes to fill the kernel's queue (16,384 events by default, about a
// tenth of a second at the fastest a tenant was measured to make them), well under a reader's scan.
constexpr std::chrono::milliseconds kGatherEvents{20};

}  // namespace

WriterIndexer::WriterIndexer(Options options, int node_fd, int inotify_fd)
    : options_(std::move(options)), node_fd_(node_fd), inotify_fd_(inotify_fd) {}

WriterIndexer::~WriterIndexer() {
  if (inotify_fd_ >= 0) ::close(inotify_fd_);
  if (node_fd_ >= 0) ::close(node_fd_);
}

Result<std::unique_ptr<WriterIndexer>> WriterIndexer::open(const Options& options) {
  auto node_fd = fs::open_dir(options.node_dir, fs::DirTrust::SharedSticky);
  if (!node_fd) return make_error("node directory refused: " + node_fd.error());
  fs::UniqueFd node_guard(*node_fd);
  const int inotify_fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (inotify_fd < 0) return make_error("inotify_init1: " + fs::errno_text(errno));
  std::unique_ptr<WriterIndexer> indexer(new WriterIndexer(options, node_guard.release(), inotify_fd));
  if (!indexer->watch()) return make_error(options.node_dir + ": cannot watch it: " + fs::errno_text(errno));
  indexer->relist();
  indexer->write_index();
  return indexer;
}

// The watch is on the directory this process opened (through /proc/self/fd), not on whatever the
// path names by now.
bool WriterIndexer::watch() {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", node_fd_);
  if (watch_ >= 0) ::inotify_rm_watch(inotify_fd_, watch_);  // the directory that was moved away
  watch_ = ::inotify_add_watch(inotify_fd_, path, kWatched);
  return watch_ >= 0;
}

bool WriterIndexer::reopen() {
  auto node_fd = fs::open_dir(options_.node_dir, fs::DirTrust::SharedSticky);
  if (!node_fd) return false;
  ::close(node_fd_);
  node_fd_ = *node_fd;
  if (!watch()) return false;
  GS_LOG(Info, "%s: watching the node directory again", options_.node_dir.c_str());
  lost_ = false;
  relist();
  dirty_ = true;
  return true;
}

void WriterIndexer::recheck(const char* name, const struct stat& node_st) {
  struct stat st {};
  const bool trusted = name[0] != '.' && shm::assignment_plain_name(name) &&
                       ::fstatat(node_fd_, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                       shm::writer_trusted(name, st, shm::kNoReader, node_st);
  const bool changed = trusted ? writers_.insert(name).second : writers_.erase(name) > 0;
  if (changed) dirty_ = true;
}

void WriterIndexer::relist() {
  listed_at_ = std::chrono::steady_clock::now();
  ++listings_;
  struct stat node_st {};
  if (::fstat(node_fd_, &node_st) != 0) return;
  const int listing_fd = ::openat(node_fd_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* listing = listing_fd >= 0 ? ::fdopendir(listing_fd) : nullptr;
  if (listing == nullptr) {
    if (listing_fd >= 0) ::close(listing_fd);
    GS_LOG(Warn, "%s: cannot list: %s", options_.node_dir.c_str(), std::strerror(errno));
    return;
  }
  std::set<std::string, std::less<>> found;
  while (dirent* entry = ::readdir(listing)) {
    // Files (the junk of a flood) cost no stat.
    if (entry->d_name[0] == '.' || (entry->d_type != DT_DIR && entry->d_type != DT_UNKNOWN)) continue;
    struct stat st {};
    if (shm::assignment_plain_name(entry->d_name) &&
        ::fstatat(node_fd_, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        shm::writer_trusted(entry->d_name, st, shm::kNoReader, node_st)) {
      found.insert(entry->d_name);
    }
  }
  ::closedir(listing);
  if (found != writers_) {
    writers_ = std::move(found);
    dirty_ = true;
  }
}

std::size_t WriterIndexer::handle_events(const struct stat& node_st) {
  alignas(inotify_event) char buffer[64 * 1024];
  std::size_t handled = 0;
  std::size_t events = 0;
  while (handled < kEventBytesPerStep) {
    const ssize_t got = ::read(inotify_fd_, buffer, sizeof buffer);
    if (got <= 0) return events;  // EAGAIN: nothing more for now
    handled += static_cast<std::size_t>(got);
    for (std::size_t at = 0; at + sizeof(inotify_event) <= static_cast<std::size_t>(got);) {
      const auto* event = reinterpret_cast<const inotify_event*>(buffer + at);
      at += sizeof(inotify_event) + event->len;
      ++events;
      if ((event->mask & IN_Q_OVERFLOW) != 0) {
        ++overflows_;
        need_relist_ = true;
        continue;
      }
      if (event->wd != watch_) continue;  // of a directory no longer watched
      if ((event->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF)) != 0) {
        lost_ = true;
        continue;
      }
      if (event->len == 0) continue;
      const char* name = event->name;
      if (std::strcmp(name, shm::kWriterIndexName) == 0) {
        // Someone else removed or replaced the index (our own rename is IN_MOVED_TO): write it again.
        if ((event->mask & IN_MOVED_TO) == 0) dirty_ = true;
        continue;
      }
      // Files are the junk of a flood (or records' neighbours): only directories can be writers.
      if ((event->mask & IN_ISDIR) == 0 && writers_.find(std::string_view(name)) == writers_.end()) continue;
      recheck(name, node_st);
    }
  }
  return events;
}

void WriterIndexer::step(std::chrono::milliseconds timeout) {
  if (lost_ && !reopen()) {
    ::poll(nullptr, 0, static_cast<int>(timeout.count()));
    return;
  }
  pollfd events{inotify_fd_, POLLIN, 0};
  if (::poll(&events, 1, static_cast<int>(timeout.count())) > 0) {
    // Events are let gather for a moment before they are read: woken for every one or two, as a
    // tenant creating and removing files as fast as it can would have it, this process spent a
    // quarter of a core reading them.
    ::poll(nullptr, 0, static_cast<int>(kGatherEvents.count()));
    struct stat node_st {};
    if (::fstat(node_fd_, &node_st) == 0) handle_events(node_st);
  }
  if (lost_) return;
  const auto now = std::chrono::steady_clock::now();
  if ((need_relist_ && now - listed_at_ >= options_.min_relist_gap) || now - listed_at_ >= options_.relist) {
    need_relist_ = false;
    relist();
  }
  if (dirty_ || now - written_at_ >= options_.refresh) write_index();
}

void WriterIndexer::write_index() {
  written_at_ = std::chrono::steady_clock::now();
  dirty_ = false;
  std::string text(shm::kWriterIndexHeader);
  for (const std::string& name : writers_) text += name + '\n';  // std::set: ascending, bytewise
  text += "end " + std::to_string(writers_.size()) + '\n';
  if (text.size() > shm::kMaxWriterIndexBytes) {
    if (!said_too_long_)
      GS_LOG(Warn,
             "%s: %zu writer directories do not fit the index (%zu bytes at most): readers list the "
             "directory",
             options_.node_dir.c_str(), writers_.size(), shm::kMaxWriterIndexBytes);
    said_too_long_ = true;
    remove_index();
    return;
  }
  said_too_long_ = false;
  // A fresh name each time, never one somebody else created (they may create any name here).
  for (int attempt = 0; attempt < 16; ++attempt) {
    char temp[64];
    std::snprintf(temp, sizeof temp, "%s.tmp-%d-%u", shm::kWriterIndexName, static_cast<int>(::getpid()),
                  temp_counter_++);
    fs::UniqueFd fd(::openat(node_fd_, temp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (fd.get() < 0) {
      if (errno == EEXIST) continue;
      GS_LOG(Error, "%s/%s: %s", options_.node_dir.c_str(), temp, std::strerror(errno));
      return;
    }
    const bool written =
        ::fchmod(fd.get(), 0644) == 0 && fs::pwrite_exact(fd.get(), text.data(), text.size(), 0);
    fd.reset();
    if (!written || ::renameat(node_fd_, temp, node_fd_, shm::kWriterIndexName) != 0) {
      GS_LOG(Error, "%s/%s: cannot write: %s", options_.node_dir.c_str(), shm::kWriterIndexName,
             std::strerror(errno));
      ::unlinkat(node_fd_, temp, 0);
      return;
    }
    ++writes_;
    return;
  }
  GS_LOG(Error, "%s: no free temporary name for the index", options_.node_dir.c_str());
}

void WriterIndexer::remove_index() {
  if (::unlinkat(node_fd_, shm::kWriterIndexName, 0) != 0 && errno != ENOENT)
    GS_LOG(Warn, "%s/%s: cannot remove: %s", options_.node_dir.c_str(), shm::kWriterIndexName,
           std::strerror(errno));
}

}  // namespace gpuslice::node
