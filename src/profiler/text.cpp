#include "profiler/text.h"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

namespace gpuslice::profiler::detail {

char* put_u64(char* out, std::uint64_t value) {
  char digits[20];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value != 0);
  while (n > 0) *out++ = digits[--n];
  return out;
}

char* put_str(char* out, const char* text, std::size_t length) {
  std::memcpy(out, text, length);
  return out + length;
}

char* put_str(char* out, const char* text) { return put_str(out, text, std::strlen(text)); }

// <dir>/<name> into `out`; false if it does not fit.
bool join_path(char* out, const char* dir, const char* name) {
  std::size_t dir_length = std::strlen(dir);
  std::size_t name_length = std::strlen(name);
  if (dir_length + 1 + name_length + 1 > PATH_MAX) return false;
  char* p = put_str(out, dir, dir_length);
  *p++ = '/';
  p = put_str(p, name, name_length);
  *p = '\0';
  return true;
}

bool write_all(int fd, const char* data, std::size_t length) {
  while (length > 0) {
    ssize_t n = ::write(fd, data, length);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    length -= static_cast<std::size_t>(n);
  }
  return true;
}

bool parse_u64(const char* text, const char* end, std::uint64_t* value) {
  if (text == end) return false;
  std::uint64_t result = 0;
  for (const char* p = text; p != end; ++p) {
    if (*p < '0' || *p > '9') return false;
    std::uint64_t digit = static_cast<std::uint64_t>(*p - '0');
    if (result > (UINT64_MAX - digit) / 10) return false;
    result = result * 10 + digit;
  }
  *value = result;
  return true;
}

std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

}  // namespace gpuslice::profiler::detail
