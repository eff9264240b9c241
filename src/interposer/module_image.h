// What a module image says its globals take on the device, read before the driver loads it, so a
// load that could never fit the quota is refused first: PTX text (`.global` arrays) and ELF cubins
// (the sizes of their `.nv.global*` sections). Fat binaries and compressed images are not read (0).
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpuslice::interposer {

// Bytes of device globals the image declares; 0 when unknown. Reads at most `limit` bytes of text.
std::uint64_t image_global_bytes(const void* image, std::size_t limit = 64u << 20);

}  // namespace gpuslice::interposer
