#include "interposer/fatbin_image.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "interposer/ptx_globals.h"

#if GPUSLICE_HAVE_ZSTD
#include <zstd.h>
#endif
#if GPUSLICE_HAVE_LZ4
#include <lz4.h>
#endif

namespace gpuslice::interposer::fatbin {
namespace {

template <class T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// a + b, saturating: sizes from an image never wrap around.
std::uint64_t add(std::uint64_t a, std::uint64_t b) { return a > ~0ULL - b ? ~0ULL : a + b; }
std::uint64_t align_up(std::uint64_t v, std::uint64_t align) {
  if (align <= 1 || (align & (align - 1)) != 0) return v;
  return v > ~0ULL - (align - 1) ? ~0ULL : (v + align - 1) & ~(align - 1);
}

// [offset, offset + length) lies within `size`.
bool within(std::uint64_t offset, std::uint64_t length, std::size_t size) {
  return offset <= size && length <= size - offset;
}

constexpr std::uint32_t kShtSymtab = 2;
constexpr std::uint32_t kShtNobits = 8;

struct Section {
  std::uint32_t name = 0;
  std::uint32_t type = 0;
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  std::uint32_t link = 0;
  std::uint64_t align = 0;
  std::uint64_t entsize = 0;
};

Section section_at(const unsigned char* header) {
  Section s;
  s.name = load<std::uint32_t>(header);
  s.type = load<std::uint32_t>(header + 4);
  s.offset = load<std::uint64_t>(header + 0x18);
  s.size = load<std::uint64_t>(header + 0x20);
  s.link = load<std::uint32_t>(header + 0x28);
  s.align = load<std::uint64_t>(header + 0x30);
  s.entsize = load<std::uint64_t>(header + 0x38);
  return s;
}

// Whether the section named at `offset` of the name table [names, names + names_size) holds globals.
bool is_global_section(const unsigned char* names, std::uint64_t names_size, std::uint32_t offset) {
  if (offset >= names_size) return false;
  const char* name = reinterpret_cast<const char*>(names + offset);
  const std::size_t room = names_size - offset;
  const std::size_t n = strnlen(name, room);
  if (n == room) return false;  // not terminated within the table
  auto starts = [&](const char* prefix) { return std::strncmp(name, prefix, std::strlen(prefix)) == 0; };
  return std::strcmp(name, ".nv.global") == 0 || std::strcmp(name, ".nv.global.init") == 0 ||
         starts(".nv.constant");
}

// Heap buffer released on every path (the library has no exceptions).
struct Buffer {
  unsigned char* data = nullptr;
  explicit Buffer(std::size_t n) : data(static_cast<unsigned char*>(std::malloc(n == 0 ? 1 : n))) {}
  ~Buffer() { std::free(data); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

struct Entry {
  EntryKind kind = EntryKind::Elf;
  const unsigned char* payload = nullptr;
  std::uint64_t payload_size = 0;     // the bytes stored
  std::uint64_t compressed_size = 0;  // 0: stored as is
  std::uint64_t uncompressed_size = 0;
  std::uint64_t flags = 0;
  int arch = 0;
};

// Globals of one entry; false when its payload cannot be read.
bool entry_globals(const Entry& e, std::uint64_t* bytes, bool* estimated) {
  const unsigned char* plain = e.payload;
  std::uint64_t plain_size = e.payload_size;
  const bool compressed = (e.flags & (kFlagLz4 | kFlagZstd)) != 0 && e.compressed_size != 0;
  // Sizes are checked before anything is allocated for them.
  if (compressed && (e.compressed_size > e.payload_size || e.uncompressed_size == 0 ||
                     e.uncompressed_size > kMaxDecompressed))
    return false;
  Buffer buffer(compressed ? static_cast<std::size_t>(e.uncompressed_size) + 1 : 0);
  if (compressed) {
    if (buffer.data == nullptr) return false;
    if (!decompress(e.flags, e.payload, e.compressed_size, buffer.data, e.uncompressed_size)) {
      // A codec this build lacks: what the entry says it holds, on the safe side of its data (its
      // NOBITS globals stay unseen until the load is measured).
      *bytes = e.uncompressed_size;
      *estimated = true;
      return true;
    }
    plain = buffer.data;
    plain_size = e.uncompressed_size;
  }
  if (e.kind == EntryKind::Elf) return cubin_globals(plain, plain_size, bytes);
  // PTX text: read up to its terminator, or all of it.
  Buffer text(plain_size + 1);
  if (text.data == nullptr) return false;
  std::memcpy(text.data, plain, plain_size);
  text.data[plain_size] = '\0';
  *bytes = ptx_global_bytes(reinterpret_cast<const char*>(text.data), plain_size + 1);
  return true;
}

}  // namespace

bool decompress(std::uint64_t flags, [[maybe_unused]] const unsigned char* in,
                [[maybe_unused]] std::size_t in_size, [[maybe_unused]] unsigned char* out,
                [[maybe_unused]] std::size_t out_size) {
  if ((flags & kFlagZstd) != 0) {
#if GPUSLICE_HAVE_ZSTD
    const std::size_t n = ZSTD_decompress(out, out_size, in, in_size);
    return ZSTD_isError(n) == 0 && n == out_size;
#else
    return false;
#endif
  }
  if ((flags & kFlagLz4) != 0) {
#if GPUSLICE_HAVE_LZ4
    if (in_size > 0x7fffffffU || out_size > 0x7fffffffU) return false;
    const int n = LZ4_decompress_safe(reinterpret_cast<const char*>(in), reinterpret_cast<char*>(out),
                                      static_cast<int>(in_size), static_cast<int>(out_size));
    return n >= 0 && static_cast<std::size_t>(n) == out_size;
#else
    return false;
#endif
  }
  return false;
}

bool cubin_globals(const unsigned char* data, std::size_t size, std::uint64_t* bytes) {
  *bytes = 0;
  if (data == nullptr || size < 64) return false;
  if (data[0] != 0x7f || data[1] != 'E' || data[2] != 'L' || data[3] != 'F') return false;
  if (data[4] != 2 || data[5] != 1) return false;  // ELFCLASS64, little-endian: what cubins are
  const auto shoff = load<std::uint64_t>(data + 0x28);
  const auto shentsize = load<std::uint16_t>(data + 0x3a);
  const auto shnum = load<std::uint16_t>(data + 0x3c);
  const auto shstrndx = load<std::uint16_t>(data + 0x3e);
  if (shentsize < 64 || shnum == 0 || shstrndx >= shnum) return false;
  if (!within(shoff, static_cast<std::uint64_t>(shnum) * shentsize, size)) return false;
  auto header = [&](unsigned i) {
    return section_at(data + shoff + static_cast<std::uint64_t>(i) * shentsize);
  };
  const Section names = header(shstrndx);
  if (names.type == kShtNobits || !within(names.offset, names.size, size)) return false;

  // Per section: its own size, and what its symbols say (the furthest extent, and their sum:
  // nvcc 13 gave three 4 GiB arrays the same offset 0 in a section of size 0).
  Buffer extents(static_cast<std::size_t>(shnum) * sizeof(std::uint64_t) * 2);
  if (extents.data == nullptr) return false;
  auto* furthest = reinterpret_cast<std::uint64_t*>(extents.data);
  std::uint64_t* summed = furthest + shnum;
  std::memset(extents.data, 0, static_cast<std::size_t>(shnum) * sizeof(std::uint64_t) * 2);
  for (unsigned i = 0; i < shnum; ++i) {
    const Section symtab = header(i);
    if (symtab.type != kShtSymtab || symtab.entsize < 24 || !within(symtab.offset, symtab.size, size))
      continue;
    const std::uint64_t count = symtab.size / symtab.entsize;
    for (std::uint64_t k = 0; k < count; ++k) {
      const unsigned char* sym = data + symtab.offset + k * symtab.entsize;
      const auto shndx = load<std::uint16_t>(sym + 6);
      const auto value = load<std::uint64_t>(sym + 8);
      const auto sym_size = load<std::uint64_t>(sym + 16);
      if (shndx == 0 || shndx >= shnum || (sym[4] & 0xf) != 1) continue;  // defined STT_OBJECT symbols
      furthest[shndx] = std::max(furthest[shndx], add(value, sym_size));
      summed[shndx] = add(summed[shndx], sym_size);
    }
  }
  std::uint64_t total = 0;
  for (unsigned i = 0; i < shnum; ++i) {
    const Section s = header(i);
    if (!is_global_section(data + names.offset, names.size, s.name)) continue;
    const std::uint64_t taken = std::max(s.size, std::max(furthest[i], summed[i]));
    total = add(total, align_up(taken, s.align));
  }
  *bytes = total;
  return true;
}

std::size_t container_span(const unsigned char* data) {
  if (data == nullptr || load<std::uint32_t>(data) != kContainerMagic) return 0;
  if (load<std::uint16_t>(data + 4) != 1 || load<std::uint16_t>(data + 6) != kContainerHeaderSize) return 0;
  const auto body = load<std::uint64_t>(data + 8);
  if (body > (1ULL << 40)) return 0;  // no image is a terabyte: a header this is not
  return static_cast<std::size_t>(kContainerHeaderSize + body);
}

Globals container_globals(const unsigned char* data, std::size_t size, int sm) {
  Globals result;
  if (data == nullptr || size < kContainerHeaderSize || load<std::uint32_t>(data) != kContainerMagic)
    return result;
  if (load<std::uint16_t>(data + 4) != 1 || load<std::uint16_t>(data + 6) != kContainerHeaderSize)
    return result;
  const auto body = load<std::uint64_t>(data + 8);
  if (!within(kContainerHeaderSize, body, size)) return result;
  const std::size_t end = kContainerHeaderSize + static_cast<std::size_t>(body);

  // One pass to choose (see the header for the rule), then the chosen entry is read.
  Entry exact, same_major, ptx, largest;
  bool have_exact = false, have_major = false, have_ptx = false;
  std::uint64_t largest_bytes = 0;
  bool any = false, largest_estimated = false;
  std::size_t at = kContainerHeaderSize;
  constexpr unsigned kMaxEntries = 4096;
  for (unsigned n = 0; n < kMaxEntries && at < end; ++n) {
    if (!within(at, kEntryHeaderSize, end)) return result;
    const unsigned char* h = data + at;
    const auto kind = load<std::uint16_t>(h);
    const auto header_size = load<std::uint32_t>(h + 4);
    const auto payload_size = load<std::uint64_t>(h + 8);
    if (header_size < kEntryHeaderSize || !within(at + header_size, payload_size, end)) return result;
    Entry e;
    e.payload = h + header_size;
    e.payload_size = payload_size;
    e.compressed_size = load<std::uint32_t>(h + 0x10);
    e.arch = static_cast<int>(load<std::uint32_t>(h + 0x1c));
    e.flags = load<std::uint64_t>(h + 0x28);
    e.uncompressed_size = load<std::uint64_t>(h + 0x38);
    at += header_size + static_cast<std::size_t>(payload_size);
    if (kind != static_cast<std::uint16_t>(EntryKind::Elf) &&
        kind != static_cast<std::uint16_t>(EntryKind::Ptx))
      continue;  // other kinds (none the driver loads as code)
    e.kind = static_cast<EntryKind>(kind);
    if (sm == 0) {
      // The device is unknown: the largest of all entries, on the safe side.
      std::uint64_t bytes = 0;
      bool estimated = false;
      if (!entry_globals(e, &bytes, &estimated)) return result;
      if (!any || bytes > largest_bytes) {
        largest = e;
        largest_bytes = bytes;
        largest_estimated = estimated;
      }
      any = true;
      continue;
    }
    if (e.kind == EntryKind::Elf) {
      if (e.arch == sm && !have_exact) {
        exact = e;
        have_exact = true;
      } else if (e.arch / 10 == sm / 10 && e.arch < sm && (!have_major || e.arch > same_major.arch)) {
        same_major = e;
        have_major = true;
      }
    } else if (e.arch <= sm && (!have_ptx || e.arch > ptx.arch)) {
      ptx = e;
      have_ptx = true;
    }
  }
  if (at != end) return result;  // entries that do not tile the container: not one
  if (sm == 0) {
    result.understood = true;
    if (any) {
      result.bytes = largest_bytes;
      result.arch = largest.arch;
      result.jit = largest.kind == EntryKind::Ptx;
      result.estimated = largest_estimated;
    }
    return result;
  }
  const Entry* chosen = have_exact ? &exact : have_major ? &same_major : have_ptx ? &ptx : nullptr;
  result.understood = true;
  if (chosen == nullptr) return result;  // nothing for this device: the driver refuses the image
  if (!entry_globals(*chosen, &result.bytes, &result.estimated)) {
    result.understood = false;
    return result;
  }
  result.arch = chosen->arch;
  result.jit = chosen->kind == EntryKind::Ptx;
  return result;
}

}  // namespace gpuslice::interposer::fatbin
