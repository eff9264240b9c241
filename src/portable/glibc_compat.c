// glibc functions that the injected libraries call but that glibc 2.17 does not export: stat()
// and friends were inline wrappers before 2.33, getdents64 (2.30) and renameat2 (2.28) are
// plain system calls, __libc_single_threaded (2.32) is read by libstdc++'s headers. Hidden, so
// the libraries' own references bind here and the host process never sees them.
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define GPUSLICE_COMPAT_API __attribute__((visibility("hidden")))

// 0 = "other threads may exist": shared_ptr and friends then always use atomic reference counts.
GPUSLICE_COMPAT_API char __libc_single_threaded = 0;

// The kernel's struct stat and glibc's are the same on x86-64 and aarch64 (both 64-bit, no padding
// conversion), which is what lets these be direct system calls.
GPUSLICE_COMPAT_API int fstatat(int dirfd, const char* path, struct stat* buf, int flags) {
  return (int)syscall(SYS_newfstatat, dirfd, path, buf, flags);
}
GPUSLICE_COMPAT_API int stat(const char* path, struct stat* buf) { return fstatat(AT_FDCWD, path, buf, 0); }
GPUSLICE_COMPAT_API int lstat(const char* path, struct stat* buf) {
  return fstatat(AT_FDCWD, path, buf, AT_SYMLINK_NOFOLLOW);
}
GPUSLICE_COMPAT_API int fstat(int fd, struct stat* buf) { return (int)syscall(SYS_fstat, fd, buf); }

GPUSLICE_COMPAT_API ssize_t getdents64(int fd, void* buffer, size_t length) {
  return (ssize_t)syscall(SYS_getdents64, fd, buffer, length);
}

GPUSLICE_COMPAT_API int renameat2(int olddirfd, const char* oldpath, int newdirfd, const char* newpath,
                                  unsigned int flags) {
  return (int)syscall(SYS_renameat2, olddirfd, oldpath, newdirfd, newpath, flags);
}
