// Parsers shared inside gpuslice_config that the public API does not expose.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/result.h"
#include "config/settings.h"

namespace gpuslice::config::detail {

// HAMi-core reads 0 as "no limit from this variable", so its variables need a zero-tolerant parse.
Result<std::uint64_t> parse_size_value(std::string_view text, SizeDialect dialect, bool allow_zero);
Result<unsigned> parse_percent_value(std::string_view text, bool allow_zero);

// Every form of a variable's value is refused beyond this length (environment values and
// limits-file lines alike), which bounds what a parse may allocate.
inline constexpr std::size_t kMaxValueBytes = std::size_t{64} * 1024;
// Device indices accepted as keys; beyond any machine CUDA enumerates today.
inline constexpr int kMaxDeviceIndex = 1023;
// Entries of one per-device list or JSON object.
inline constexpr std::size_t kMaxDeviceEntries = 256;

}  // namespace gpuslice::config::detail
