#include "interposer/module_image.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "interposer/fatbin_image.h"

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

namespace {

// How far an ELF image in memory extends, from its headers: its section table and the sections'
// data (NOBITS take none). 0 when the header is not plausible.
std::size_t elf_span(const unsigned char* image, std::size_t limit) {
  std::uint64_t shoff = 0;
  std::uint16_t shentsize = 0, shnum = 0;
  std::memcpy(&shoff, image + 0x28, 8);
  std::memcpy(&shentsize, image + 0x3a, 2);
  std::memcpy(&shnum, image + 0x3c, 2);
  if (shentsize < 64 || shnum == 0 || shoff > limit || std::uint64_t{shnum} * shentsize > limit - shoff)
    return 0;
  std::uint64_t span = shoff + std::uint64_t{shnum} * shentsize;
  for (unsigned i = 0; i < shnum; ++i) {
    const unsigned char* s = image + shoff + std::uint64_t{i} * shentsize;
    std::uint32_t type = 0;
    std::uint64_t offset = 0, size = 0;
    std::memcpy(&type, s + 4, 4);
    std::memcpy(&offset, s + 0x18, 8);
    std::memcpy(&size, s + 0x20, 8);
    if (type == 8) continue;  // SHT_NOBITS
    if (offset > limit || size > limit - offset) return 0;
    span = std::max(span, offset + size);
  }
  return static_cast<std::size_t>(span);
}

}  // namespace

ImageGlobals image_globals(const void* image, int sm, std::size_t limit) {
  ImageGlobals out;
  if (image == nullptr) return out;
  const auto* bytes = static_cast<const unsigned char*>(image);
  std::uint32_t magic = 0;
  std::memcpy(&magic, bytes, 4);
  if (magic == fatbin::kWrapperMagic) {
    // The runtime's wrapper: {magic, version, the container, ...}.
    const unsigned char* container = nullptr;
    std::memcpy(&container, bytes + 8, sizeof container);
    if (container == nullptr) return out;
    bytes = container;
    std::memcpy(&magic, bytes, 4);
  }
  if (magic == fatbin::kContainerMagic) {
    const std::size_t span = fatbin::container_span(bytes);
    if (span == 0 || span > limit) return out;
    const fatbin::Globals g = fatbin::container_globals(bytes, span, sm);
    out.understood = g.understood;
    out.bytes = g.bytes;
    return out;
  }
  if (std::memcmp(bytes,
                  "\x7f"
                  "ELF",
                  4) == 0) {
    const std::size_t span = elf_span(bytes, limit);
    out.understood = span != 0 && fatbin::cubin_globals(bytes, span, &out.bytes);
    return out;
  }
  const auto* text = static_cast<const char*>(image);
  // PTX begins with comments or its .version directive.
  const char* start = text;
  while (*start == ' ' || *start == '\n' || *start == '\t' || *start == '\r') ++start;
  if (std::strncmp(start, "//", 2) != 0 && std::strncmp(start, ".version", 8) != 0) return out;
  out.bytes = ptx_global_bytes(text, 64u << 20);
  out.understood = true;
  return out;
}

}  // namespace gpuslice::interposer
