#include "common/safe_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/errno_text.h"

namespace gpuslice::fs {
namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

std::string octal(mode_t mode) {
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "%04o", static_cast<unsigned>(mode & 07777));
  return buffer;
}

// An error whose errno is `err` after it was built: callers tell a missing file by ENOENT.
Error failed(int err, std::string message) {
  Error error{std::move(message)};
  errno = err;
  return error;
}

bool single_component(const char* name) {
  if (name == nullptr || name[0] == '\0') return false;
  if (std::strchr(name, '/') != nullptr) return false;
  return std::strcmp(name, ".") != 0 && std::strcmp(name, "..") != 0;
}

}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

int open_in_dir_raw(int dirfd, const char* name, int flags, mode_t mode) {
  if (!single_component(name)) {
    errno = EINVAL;
    return -1;
  }
  auto refuse = [](mode_t kind) {
    errno = S_ISLNK(kind) ? ELOOP : S_ISDIR(kind) ? EISDIR : EINVAL;
    return -1;
  };
  struct stat before {};
  if (::fstatat(dirfd, name, &before, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(before.st_mode)) {
    return refuse(before.st_mode);
  }
  const bool truncate = (flags & O_TRUNC) != 0;
  const bool keep_nonblock = (flags & O_NONBLOCK) != 0;
  int fd = ::openat(dirfd, name, (flags & ~O_TRUNC) | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, mode);
  if (fd < 0) return -1;
  struct stat st {};
  int err = 0;
  if (::fstat(fd, &st) != 0) {
    err = errno;
  } else if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return refuse(st.st_mode);
  } else if (!keep_nonblock) {
    int current = ::fcntl(fd, F_GETFL);
    if (current < 0 || ::fcntl(fd, F_SETFL, current & ~O_NONBLOCK) != 0) err = errno;
  }
  if (err == 0 && truncate && ::ftruncate(fd, 0) != 0) err = errno;
  if (err != 0) {
    ::close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

bool dir_trusted_raw(int dirfd, DirTrust trust) {
  struct stat st {};
  if (::fstat(dirfd, &st) != 0) return false;
  if (!S_ISDIR(st.st_mode)) {
    errno = ENOTDIR;
    return false;
  }
  if (trust == DirTrust::Any) return true;
  const bool owner_ok = st.st_uid == ::geteuid() || st.st_uid == 0;
  const bool shared_writable = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
  const bool ok =
      owner_ok && (!shared_writable || (trust == DirTrust::SharedSticky && (st.st_mode & S_ISVTX) != 0));
  if (!ok) errno = EPERM;
  return ok;
}

int open_dir_raw(const char* path, DirTrust trust) {
  int fd = ::open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return -1;
  if (!dir_trusted_raw(fd, trust)) {
    int err = errno;
    ::close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

Result<bool> check_dir(int dirfd, DirTrust trust, const std::string& what) {
  struct stat st {};
  if (::fstat(dirfd, &st) != 0) return make_error(what + ": cannot stat: " + errno_text(errno));
  if (!S_ISDIR(st.st_mode)) return make_error(what + ": is " + kind_of(st.st_mode) + ", not a directory");
  if (trust == DirTrust::Any) return true;
  const uid_t self = ::geteuid();
  if (st.st_uid != self && st.st_uid != 0) {
    return make_error(what + ": owned by uid " + std::to_string(st.st_uid) + ", neither us (uid " +
                      std::to_string(self) + ") nor root; refusing a directory another user controls");
  }
  const bool shared_writable = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
  if (!shared_writable) return true;
  if (trust == DirTrust::OwnerOnly) {
    return make_error(what + ": mode " + octal(st.st_mode) +
                      " lets other users write it; it must not be group- or world-writable");
  }
  if ((st.st_mode & S_ISVTX) == 0) {
    return make_error(what + ": mode " + octal(st.st_mode) +
                      " is writable by others without the sticky bit, so anyone could replace our files");
  }
  return true;
}

Result<int> open_dir(const std::string& path, DirTrust trust) {
  if (path.empty()) return make_error("empty directory path");
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ELOOP) return failed(err, path + ": is a symbolic link; refusing to follow it");
    if (err == ENOTDIR) return failed(err, path + ": not a directory");
    return failed(err, path + ": cannot open directory: " + errno_text(err));
  }
  UniqueFd guard(fd);
  auto checked = check_dir(fd, trust, path);
  if (!checked) return failed(EPERM, checked.error());
  return guard.release();
}

Result<int> open_in_dir(int dirfd, const char* name, int flags, mode_t mode) {
  if (!single_component(name)) {
    return failed(EINVAL, std::string("'") + (name != nullptr ? name : "") + "' is not a single file name");
  }
  auto refuse = [name](mode_t kind) {
    if (S_ISLNK(kind))
      return failed(ELOOP, std::string(name) + ": is a symbolic link; refusing to follow it");
    return failed(S_ISDIR(kind) ? EISDIR : EINVAL,
                  std::string(name) + ": is " + kind_of(kind) + ", not a regular file");
  };
  // Look before opening so a FIFO or device node is never opened (opening one can block or act).
  struct stat before {};
  if (::fstatat(dirfd, name, &before, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(before.st_mode)) {
    return refuse(before.st_mode);
  }
  const bool truncate = (flags & O_TRUNC) != 0;
  const bool keep_nonblock = (flags & O_NONBLOCK) != 0;
  int open_flags = (flags & ~O_TRUNC) | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK;
  int fd = ::openat(dirfd, name, open_flags, mode);
  if (fd < 0) {
    const int err = errno;
    if (err == ELOOP) return refuse(S_IFLNK);
    return failed(err, std::string(name) + ": " + errno_text(err));
  }
  UniqueFd guard(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    return failed(err, std::string(name) + ": cannot stat: " + errno_text(err));
  }
  if (!S_ISREG(st.st_mode)) return refuse(st.st_mode);
  if (!keep_nonblock) {
    int current = ::fcntl(fd, F_GETFL);
    if (current < 0 || ::fcntl(fd, F_SETFL, current & ~O_NONBLOCK) != 0) {
      const int err = errno;
      return failed(err, std::string(name) + ": fcntl: " + errno_text(err));
    }
  }
  if (truncate && ::ftruncate(fd, 0) != 0) {
    const int err = errno;
    return failed(err, std::string(name) + ": cannot truncate: " + errno_text(err));
  }
  return guard.release();
}

Result<std::string> read_fd_bounded(int fd, std::size_t max_bytes) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return make_error("cannot stat: " + errno_text(errno));
  if (!S_ISREG(st.st_mode))
    return make_error(std::string("is ") + kind_of(st.st_mode) + ", not a regular file");
  if (st.st_size < 0 || static_cast<std::size_t>(st.st_size) > max_bytes) {
    return make_error("is " + std::to_string(st.st_size) + " bytes, more than the " +
                      std::to_string(max_bytes) + " accepted");
  }
  // The file may grow between fstat and the reads: reading up to one byte past the limit notices.
  const std::size_t limit = max_bytes + 1;
  std::string data(std::min(static_cast<std::size_t>(st.st_size) + 1, limit), '\0');
  std::size_t used = 0;
  for (;;) {
    if (used == data.size()) {
      if (data.size() >= limit) {
        return make_error("grew past the " + std::to_string(max_bytes) + " bytes accepted while being read");
      }
      data.resize(std::min(data.size() * 2 + 4096, limit));
    }
    ssize_t n = ::pread(fd, data.data() + used, data.size() - used, static_cast<off_t>(used));
    if (n < 0) {
      if (errno == EINTR) continue;
      return make_error("cannot read: " + errno_text(errno));
    }
    if (n == 0) break;
    used += static_cast<std::size_t>(n);
  }
  data.resize(used);
  return data;
}

bool split_path(const std::string& path, std::string* dir, std::string* base) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) {
    *dir = ".";
    *base = path;
  } else {
    *dir = slash == 0 ? "/" : path.substr(0, slash);
    *base = path.substr(slash + 1);
  }
  return !base->empty();
}

Result<int> open_for_reading(const std::string& path, DirTrust trust) {
  std::string dir, base;
  if (!split_path(path, &dir, &base)) return failed(EINVAL, path + ": not a file name");
  auto dirfd = open_dir(dir, trust);
  if (!dirfd) {
    const int err = errno;
    return failed(err, dirfd.error());
  }
  auto fd = open_in_dir(*dirfd, base.c_str(), O_RDONLY);
  const int err = errno;
  ::close(*dirfd);
  if (!fd) return failed(err, dir + "/" + fd.error());
  return fd;
}

Result<std::string> read_small_file(const std::string& path, std::size_t max_bytes, DirTrust trust) {
  auto fd = open_for_reading(path, trust);
  if (!fd) return make_error(fd.error());
  UniqueFd file_guard(*fd);
  auto data = read_fd_bounded(*fd, max_bytes);
  if (!data) return make_error(path + ": " + data.error());
  return data;
}

namespace {

// Calls `io(done)` (one pread or pwrite from byte `done` on) until `length` bytes are moved,
// retrying EINTR. A call that moves nothing fails with errno `stalled`.
template <class Io>
bool move_exact(std::size_t length, int stalled, Io io) {
  std::size_t done = 0;
  while (done < length) {
    ssize_t n = io(done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (n == 0) {
      errno = stalled;
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

bool pread_exact(int fd, void* buffer, std::size_t length, off_t offset) {
  auto* out = static_cast<char*>(buffer);
  // errno 0: the file ended first.
  return move_exact(length, 0, [&](std::size_t done) {
    return ::pread(fd, out + done, length - done, offset + static_cast<off_t>(done));
  });
}

bool pwrite_exact(int fd, const void* buffer, std::size_t length, off_t offset) {
  const auto* in = static_cast<const char*>(buffer);
  return move_exact(length, EIO, [&](std::size_t done) {
    return ::pwrite(fd, in + done, length - done, offset + static_cast<off_t>(done));
  });
}

}  // namespace gpuslice::fs
