#include "interposer/module_image.h"

#include <cstdlib>
#include <cstring>

namespace gpuslice::interposer {
namespace {

constexpr unsigned char kElfMagic[4] = {0x7f, 'E', 'L', 'F'};

// ELF64 little-endian, as cubins are: the sizes of the sections holding device globals.
std::uint64_t elf_global_bytes(const unsigned char* image) {
  if (image[4] != 2 || image[5] != 1) return 0;  // ELFCLASS64, little-endian
  std::uint64_t shoff = 0;
  std::uint16_t shentsize = 0, shnum = 0, shstrndx = 0;
  std::memcpy(&shoff, image + 0x28, 8);
  std::memcpy(&shentsize, image + 0x3a, 2);
  std::memcpy(&shnum, image + 0x3c, 2);
  std::memcpy(&shstrndx, image + 0x3e, 2);
  if (shoff == 0 || shentsize < 64 || shnum == 0 || shstrndx >= shnum || shnum > 65000) return 0;
  auto section = [&](unsigned i) { return image + shoff + static_cast<std::uint64_t>(i) * shentsize; };
  std::uint64_t names = 0;
  std::memcpy(&names, section(shstrndx) + 0x18, 8);  // sh_offset of the name table
  std::uint64_t total = 0;
  for (unsigned i = 0; i < shnum; ++i) {
    std::uint32_t name = 0;
    std::uint64_t size = 0;
    std::memcpy(&name, section(i), 4);
    std::memcpy(&size, section(i) + 0x20, 8);
    const char* text = reinterpret_cast<const char*>(image + names + name);
    if (std::strncmp(text, ".nv.global", 10) == 0) total += size;
  }
  return total;
}

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

}  // namespace

std::uint64_t image_global_bytes(const void* image, std::size_t limit) {
  if (image == nullptr) return 0;
  const auto* bytes = static_cast<const unsigned char*>(image);
  if (std::memcmp(bytes, kElfMagic, sizeof kElfMagic) == 0) return elf_global_bytes(bytes);
  const auto* text = static_cast<const char*>(image);
  // PTX begins with comments or its .version directive.
  const char* start = text;
  while (*start == ' ' || *start == '\n' || *start == '\t' || *start == '\r') ++start;
  if (std::strncmp(start, "//", 2) != 0 && std::strncmp(start, ".version", 8) != 0) return 0;
  return ptx_global_bytes(text, limit);
}

}  // namespace gpuslice::interposer
