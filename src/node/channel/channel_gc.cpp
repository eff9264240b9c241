#include "node/channel/channel_gc.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <vector>

#include "common/log.h"
#include "common/safe_file.h"

namespace gpuslice::node {
namespace {

// A directory full of files its writer keeps planting is not examined past this many entries: it
// is not stale then anyway (they are new), and the next pass looks again.
constexpr std::size_t kMaxEntries = 4096;

std::uint64_t mtime_ns(const struct stat& st) {
  return static_cast<std::uint64_t>(st.st_mtim.tv_sec) * 1'000'000'000ULL +
         static_cast<std::uint64_t>(st.st_mtim.tv_nsec);
}

// The newest change in the writer directory `fd` (its own, and each entry's); false when it could
// not be read completely.
bool newest_change(int fd, const struct stat& dir_st, std::uint64_t* newest,
                   std::vector<std::string>* files) {
  *newest = mtime_ns(dir_st);
  const int listing_fd = ::dup(fd);
  if (listing_fd < 0) return false;
  DIR* listing = ::fdopendir(listing_fd);
  if (listing == nullptr) {
    ::close(listing_fd);
    return false;
  }
  bool complete = true;
  while (dirent* entry = ::readdir(listing)) {
    if (entry->d_name[0] == '.' &&
        (entry->d_name[1] == '\0' || (entry->d_name[1] == '.' && entry->d_name[2] == '\0')))
      continue;
    struct stat st {};
    if (files->size() >= kMaxEntries || ::fstatat(fd, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      complete = false;
      break;
    }
    if (mtime_ns(st) > *newest) *newest = mtime_ns(st);
    files->emplace_back(entry->d_name);
  }
  ::closedir(listing);
  return complete;
}

}  // namespace

std::size_t remove_stale_writers(const std::string& channel_dir, std::uint64_t grace_ns,
                                 std::uint64_t now_ns) {
  if (grace_ns == 0) return 0;
  fs::UniqueFd channel(::open(channel_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (channel.get() < 0) return 0;
  std::vector<std::string> writers;
  {
    const int listing_fd = ::dup(channel.get());
    DIR* listing = listing_fd >= 0 ? ::fdopendir(listing_fd) : nullptr;
    if (listing == nullptr) {
      if (listing_fd >= 0) ::close(listing_fd);
      return 0;
    }
    while (dirent* entry = ::readdir(listing)) {
      const std::string name = entry->d_name;
      const std::string suffix = ".assigned";
      if (name.size() > suffix.size() &&
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
        writers.push_back(name.substr(0, name.size() - suffix.size()));
    }
    ::closedir(listing);
  }
  std::size_t removed = 0;
  for (const std::string& writer : writers) {
    if (writer.empty() || writer[0] == '.' || writer.find('/') != std::string::npos) continue;
    struct stat st {};
    if (::fstatat(channel.get(), writer.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != 0) {
      continue;
    }
    fs::UniqueFd dir(
        ::openat(channel.get(), writer.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat opened {};
    if (dir.get() < 0 || ::fstat(dir.get(), &opened) != 0 || opened.st_ino != st.st_ino ||
        opened.st_dev != st.st_dev)
      continue;
    std::uint64_t newest = 0;
    std::vector<std::string> files;
    if (!newest_change(dir.get(), opened, &newest, &files) || newest + grace_ns > now_ns) continue;
    bool emptied = true;
    for (const std::string& file : files) {
      struct stat fst {};
      // Records are regular files; anything else a tenant made is removed too if it can be.
      if (::fstatat(dir.get(), file.c_str(), &fst, AT_SYMLINK_NOFOLLOW) != 0 || S_ISDIR(fst.st_mode) ||
          ::unlinkat(dir.get(), file.c_str(), 0) != 0) {
        emptied = false;
      }
    }
    if (!emptied || ::unlinkat(channel.get(), writer.c_str(), AT_REMOVEDIR) != 0) continue;
    ::unlinkat(channel.get(), (writer + ".assigned").c_str(), 0);
    GS_LOG(Info, "removed node-channel writer %s: unchanged for the grace period", writer.c_str());
    ++removed;
  }
  return removed;
}

}  // namespace gpuslice::node
