// What PTX text declares in device globals (`.global` arrays), read before the driver compiles it:
// a module image of its own, or an entry of a fat binary (fatbin_image.h, module_image.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpuslice::interposer {

// `.global` declarations of PTX text, NUL-terminated within `limit` bytes (0 otherwise).
std::uint64_t ptx_global_bytes(const char* text, std::size_t limit);

}  // namespace gpuslice::interposer
