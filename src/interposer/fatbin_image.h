// What a module image's globals take on the device, read from the image before the driver loads
// it: fat binaries (the container nvcc embeds and the runtime registers), the entry the driver
// would load for the device's architecture, decompressed where compressed, and the ELF cubin's
// global and constant sections. Every size in the image is checked against the bytes it came
// with: a malformed image reads as "not understood", never out of bounds.
//
// The container (magic 0xBA55ED50): a 16-byte header (magic, version 1, header size 16, the size of
// the entries that follow), then entries, each a header (kind 1 PTX / 2 ELF, its own header size,
// the payload size, the compressed size, the architecture, flags, the uncompressed size) followed by
// its payload. The runtime's wrapper (magic 0x466243B1) points at a container.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpuslice::interposer::fatbin {

inline constexpr std::uint32_t kContainerMagic = 0xBA55ED50;
inline constexpr std::uint32_t kWrapperMagic = 0x466243B1;
inline constexpr std::size_t kContainerHeaderSize = 16;
inline constexpr std::size_t kEntryHeaderSize = 64;  // the fields read; an entry's header may be longer
// Entry flags: compressed with LZ4's block format (nvcc -Xfatbin -compress-all, CUDA 11.x to 12.7),
// or with Zstandard (CUDA 12.8 on, and CUDA 13's compression).
inline constexpr std::uint64_t kFlagLz4 = 0x2000;
inline constexpr std::uint64_t kFlagZstd = 0x8000;
// The most an entry may decompress to: a cubin's code and data, never its NOBITS globals.
inline constexpr std::uint64_t kMaxDecompressed = 512ULL << 20;

enum class EntryKind : std::uint16_t { Ptx = 1, Elf = 2 };

struct Globals {
  std::uint64_t bytes = 0;  // what the chosen entry's globals take on the device
  bool understood = false;  // false: not an image this reader knows (nothing is charged from it)
  int arch = 0;             // the chosen entry's architecture (e.g. 90), 0 when none was chosen
  bool jit = false;         // the chosen entry is PTX the driver compiles
  bool estimated = false;   // compressed with a codec this build cannot decompress: its sizes only
};

// The globals of an ELF cubin held in [data, data + size): .nv.global (NOBITS: sized by its
// symbols too, since nvcc 13 writes the section's size modulo 2^32: 0 for 3 x 4 GiB), .nv.global.init
// and the constant banks (.nv.constant*), each rounded up to its alignment.
bool cubin_globals(const unsigned char* data, std::size_t size, std::uint64_t* bytes);

// The globals of the entry of the container in [data, data + size) that the driver loads on a
// device of architecture `sm` (major * 10 + minor; 0 when unknown: the largest of all entries).
// The rule: an ELF entry for exactly `sm`; else the newest ELF entry of the same major below it
// (SASS runs on later minors of its major); else the newest PTX entry at or below `sm`, compiled by
// the driver; else nothing (the driver would refuse the image).
Globals container_globals(const unsigned char* data, std::size_t size, int sm);

// How many bytes the container starting at `data` spans, from its header (0 when it is not one).
// For images in memory, whose length the driver is not told either.
std::size_t container_span(const unsigned char* data);

// Decompresses an entry's payload into [out, out + out_size); false when it cannot.
bool decompress(std::uint64_t flags, const unsigned char* in, std::size_t in_size, unsigned char* out,
                std::size_t out_size);

}  // namespace gpuslice::interposer::fatbin
