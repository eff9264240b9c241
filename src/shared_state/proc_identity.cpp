#include "shared_state/proc_identity.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>

namespace gpuslice::shm {
namespace {

// Inode of the initial PID namespace (PROC_PID_INIT_INO in the kernel), stable ABI.
constexpr const char* kInitialPidNamespace = "pid:[4026531836]";

std::size_t read_file(const char* path, char* buffer, std::size_t capacity) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  std::size_t total = 0;
  while (total < capacity) {
    ssize_t n = ::read(fd, buffer + total, capacity - total);
    if (n <= 0) break;
    total += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return total;
}

}  // namespace

std::int32_t host_pid_from_status(const char* status, std::size_t size, bool initial_namespace,
                                  std::int32_t own_pid) {
  if (initial_namespace) return own_pid;
  const char* end = status + size;
  const char* line = status;
  constexpr char kKey[] = "NSpid:";
  while (line < end) {
    const char* eol = static_cast<const char*>(std::memchr(line, '\n', static_cast<std::size_t>(end - line)));
    if (eol == nullptr) eol = end;
    if (static_cast<std::size_t>(eol - line) > sizeof kKey - 1 &&
        std::memcmp(line, kKey, sizeof kKey - 1) == 0) {
      std::int64_t first = -1;
      int fields = 0;
      const char* p = line + sizeof kKey - 1;
      while (p < eol) {
        while (p < eol && (*p == ' ' || *p == '\t')) ++p;
        if (p == eol) break;
        std::int64_t value = 0;
        bool digits = false;
        while (p < eol && *p >= '0' && *p <= '9') {
          value = value * 10 + (*p - '0');
          digits = true;
          if (value > 0x7fffffff) return 0;
          ++p;
        }
        if (!digits) return 0;
        if (fields++ == 0) first = value;
      }
      return fields >= 2 ? static_cast<std::int32_t>(first) : 0;
    }
    line = eol + 1;
  }
  return 0;
}

std::int32_t detect_host_pid() {
  char ns[64] = {};
  ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
  bool initial = n > 0 && std::strcmp(ns, kInitialPidNamespace) == 0;
  char status[8192];
  std::size_t size = initial ? 0 : read_file("/proc/self/status", status, sizeof status);
  return host_pid_from_status(status, size, initial, static_cast<std::int32_t>(getpid()));
}

void read_own_command(std::uint64_t (&words)[layout::kCommandWords]) {
  char text[layout::kCommandWords * 8] = {};
  constexpr std::size_t kMax = sizeof text - 1;  // keep a NUL
  std::size_t n = read_file("/proc/self/cmdline", text, kMax);
  while (n > 0 && text[n - 1] == '\0') --n;
  for (std::size_t i = 0; i < n; ++i) {
    if (text[i] == '\0') text[i] = ' ';
  }
  if (n == 0) {
    n = read_file("/proc/self/comm", text, kMax);
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\0')) --n;
  }
  std::memset(text + n, 0, sizeof text - n);
  std::memcpy(words, text, sizeof text);
}

}  // namespace gpuslice::shm
