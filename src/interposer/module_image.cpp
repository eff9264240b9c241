#include "interposer/module_image.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "interposer/fatbin_image.h"
#include "interposer/ptx_globals.h"

namespace gpuslice::interposer {
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
