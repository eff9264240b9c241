// What a module image says its globals take on the device, read before the driver loads it, so the
// load is charged (and refused past the quota) before the driver takes anything: PTX text
// (ptx_globals.h), ELF cubins, fat binaries and the runtime's fat-binary wrapper (fatbin_image.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpuslice::interposer {

struct ImageGlobals {
  std::uint64_t bytes = 0;  // 0 when unknown or none
  bool understood = false;  // a format read here (PTX, cubin, fat binary)
};

// The globals of the image at `image` (in memory, its length unknown as it is to the driver) on a
// device of architecture `sm` (major * 10 + minor; 0: unknown). Reads at most `limit` bytes.
ImageGlobals image_globals(const void* image, int sm, std::size_t limit = 1ULL << 30);

// Bytes of device globals the image declares; 0 when unknown (the device's architecture unknown).
inline std::uint64_t image_global_bytes(const void* image) { return image_globals(image, 0).bytes; }

}  // namespace gpuslice::interposer
