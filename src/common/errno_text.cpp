#include "common/errno_text.h"

#include <cerrno>
#include <cstring>

namespace gpuslice::fs {

// Names of the errors a file, socket or device call here can return. glibc has a lookup
// (strerrorname_np) only since 2.32, above the injected library's glibc floor (docs/portability.md).
const char* errno_name(int err) {
  // clang-format off
  static constexpr struct {
    int value;
    const char* name;
  } kNames[] = {
#define GS_ERRNO(name) {name, #name}
      GS_ERRNO(EPERM), GS_ERRNO(ENOENT), GS_ERRNO(ESRCH), GS_ERRNO(EINTR), GS_ERRNO(EIO), GS_ERRNO(ENXIO),
      GS_ERRNO(E2BIG), GS_ERRNO(ENOEXEC), GS_ERRNO(EBADF), GS_ERRNO(ECHILD), GS_ERRNO(EAGAIN),
      GS_ERRNO(ENOMEM), GS_ERRNO(EACCES), GS_ERRNO(EFAULT), GS_ERRNO(EBUSY), GS_ERRNO(EEXIST),
      GS_ERRNO(EXDEV), GS_ERRNO(ENODEV), GS_ERRNO(ENOTDIR), GS_ERRNO(EISDIR), GS_ERRNO(EINVAL),
      GS_ERRNO(ENFILE), GS_ERRNO(EMFILE), GS_ERRNO(ENOTTY), GS_ERRNO(ETXTBSY), GS_ERRNO(EFBIG),
      GS_ERRNO(ENOSPC), GS_ERRNO(ESPIPE), GS_ERRNO(EROFS), GS_ERRNO(EMLINK), GS_ERRNO(EPIPE),
      GS_ERRNO(ERANGE), GS_ERRNO(EDEADLK), GS_ERRNO(ENAMETOOLONG), GS_ERRNO(ENOLCK), GS_ERRNO(ENOSYS),
      GS_ERRNO(ENOTEMPTY), GS_ERRNO(ELOOP), GS_ERRNO(EOVERFLOW), GS_ERRNO(ENOTSOCK), GS_ERRNO(EADDRINUSE),
      GS_ERRNO(EADDRNOTAVAIL), GS_ERRNO(ENETUNREACH), GS_ERRNO(ECONNRESET), GS_ERRNO(ECONNREFUSED),
      GS_ERRNO(ETIMEDOUT), GS_ERRNO(EHOSTUNREACH), GS_ERRNO(ESTALE), GS_ERRNO(EDQUOT), GS_ERRNO(ECANCELED),
      GS_ERRNO(EOPNOTSUPP),
#undef GS_ERRNO
  };
  // clang-format on
  for (const auto& entry : kNames)
    if (entry.value == err) return entry.name;
  return "E?";
}

std::string errno_text(int err) {
  char buffer[256];
  // The GNU strerror_r: thread-safe, returns the text (in `buffer` or a static string).
  const char* description = ::strerror_r(err, buffer, sizeof buffer);
  std::string text = description != nullptr ? description : "Unknown error " + std::to_string(err);
  text += " (";
  text += errno_name(err);
  text += ')';
  return text;
}

}  // namespace gpuslice::fs
