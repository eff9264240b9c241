// The one way gpuslice opens files in directories that someone else may be able to write (a shared
// state dir, the node channel, a profile dir): the directory's owner and mode are checked first, the
// file is opened relative to it without following a symlink, anything but a regular file is refused
// before it can block (FIFO) or have side effects (device node), and reads are bounded.
// Nothing here throws or needs the C++ runtime beyond std::string, so the injected library uses it.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

#include "common/result.h"

namespace gpuslice::fs {

// Who may have written the directory a file is opened in.
enum class DirTrust {
  OwnerOnly,     // owned by us (or root), not writable by group or others
  SharedSticky,  // owned by us (or root); writable by group/others only with the sticky bit (01777-like)
  Any,           // the caller trusts it by other means (a path the operator configured)
};

// Closes the descriptor it holds when it goes out of scope.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// Checks an open directory's owner and mode against `trust`; `what` names it in the message.
Result<bool> check_dir(int dirfd, DirTrust trust, const std::string& what);

// Opens a directory (O_DIRECTORY|O_NOFOLLOW|O_CLOEXEC: a symlink as last component is refused) and
// checks it by `trust`. The caller owns the returned descriptor. When the directory does not exist
// errno is ENOENT after the call.
Result<int> open_dir(const std::string& path, DirTrust trust);

// openat(dirfd, name, flags|O_NOFOLLOW|O_CLOEXEC|O_NONBLOCK, mode), refusing anything but a regular
// file: an existing non-regular entry is refused before it is opened, and the opened file is checked
// again with fstat. `name` must be a single path component. O_TRUNC is applied only once the file is
// known to be regular. O_NONBLOCK is cleared again unless the caller asked for it. Returns the fd.
// When the file does not exist (and O_CREAT was not given) errno is ENOENT after the call.
Result<int> open_in_dir(int dirfd, const char* name, int flags, mode_t mode = 0600);

// open_dir(dirname, trust) + open_in_dir(basename, O_RDONLY); the error names the path. When the
// file or its directory does not exist errno is ENOENT after the call.
Result<int> open_for_reading(const std::string& path, DirTrust trust = DirTrust::Any);

// Allocation-free forms, for code that may run in a signal handler: -1 or false with errno set
// (ELOOP: a symbolic link; EISDIR: a directory; EINVAL: another non-regular file or a bad name;
// EPERM: a directory that `trust` refuses).
int open_in_dir_raw(int dirfd, const char* name, int flags, mode_t mode = 0600);
bool dir_trusted_raw(int dirfd, DirTrust trust);
int open_dir_raw(const char* path, DirTrust trust);

// Reads a whole regular file of at most max_bytes (an error if larger). Never blocks on a FIFO.
Result<std::string> read_fd_bounded(int fd, std::size_t max_bytes);

// open_for_reading(path, trust) + read_fd_bounded(max_bytes).
// Never blocks on FIFOs and never follows a symlink in the last component.
Result<std::string> read_small_file(const std::string& path, std::size_t max_bytes,
                                    DirTrust trust = DirTrust::Any);

// pread/pwrite of exactly `length` bytes (retrying short transfers and EINTR); false otherwise,
// with errno set (0 when the file ended early). No allocation.
bool pread_exact(int fd, void* buffer, std::size_t length, off_t offset);
bool pwrite_exact(int fd, const void* buffer, std::size_t length, off_t offset);

// Splits "a/b/c" into "a/b" and "c" ("c" alone gives "."); false for an empty last component.
bool split_path(const std::string& path, std::string* dir, std::string* base);

}  // namespace gpuslice::fs
