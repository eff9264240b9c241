#include "interposer/ptx_globals.h"

#include <cstdlib>
#include <cstring>

namespace gpuslice::interposer {
namespace {

std::uint64_t ptx_type_bytes(const char* t) {
  if (t[0] != '.') return 0;
  const char kind = t[1];
  if (kind != 'b' && kind != 'u' && kind != 's' && kind != 'f') return 0;
  const int bits = std::atoi(t + 2);
  return bits == 8 || bits == 16 || bits == 32 || bits == 64 ? static_cast<std::uint64_t>(bits) / 8 : 0;
}

// Whether the `.global` at `at` opens a declaration line: only blanks, `.visible` or `.weak` before it.
bool declares(const char* text, const char* at) {
  const char* line = at;
  while (line > text && line[-1] != '\n') --line;
  while (line < at && (*line == ' ' || *line == '\t')) ++line;
  if (line == at) return true;
  static const char* const kLinkages[] = {".visible", ".weak"};
  for (const char* linkage : kLinkages) {
    const std::size_t n = std::strlen(linkage);
    if (static_cast<std::size_t>(at - line) > n && std::strncmp(line, linkage, n) == 0) {
      const char* rest = line + n;
      while (rest < at && (*rest == ' ' || *rest == '\t')) ++rest;
      if (rest == at) return true;
    }
  }
  return false;
}

}  // namespace

// `.global [.align N] .TYPE name[N][M]...;` declarations of PTX text.
std::uint64_t ptx_global_bytes(const char* text, std::size_t limit) {
  std::uint64_t total = 0;
  const char* end = static_cast<const char*>(std::memchr(text, '\0', limit));
  if (end == nullptr) return 0;
  for (const char* p = std::strstr(text, ".global"); p != nullptr && p < end;
       p = std::strstr(p + 7, ".global")) {
    if (!declares(text, p)) continue;  // an instruction's state space (ld.global), an .extern
    const char* q = p + 7;
    std::uint64_t element = 0, count = 1;
    bool array = false;
    while (q < end && *q != ';' && *q != '\n' && *q != '{') {
      if (*q == '.' && element == 0) element = ptx_type_bytes(q);
      if (*q == '[') {
        char* after = nullptr;
        const unsigned long long n = std::strtoull(q + 1, &after, 10);
        if (after != q + 1 && __builtin_mul_overflow(count, n, &count)) return ~0ULL;
        array = true;
      }
      ++q;
    }
    if (element != 0) {
      std::uint64_t bytes = 0;
      if (__builtin_mul_overflow(element, array ? count : 1, &bytes) ||
          __builtin_add_overflow(total, bytes, &total))
        return ~0ULL;
    }
  }
  return total;
}

}  // namespace gpuslice::interposer
