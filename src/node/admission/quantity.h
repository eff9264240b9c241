// Kubernetes resource quantities ("16Gi", "500M", "1.5Gi", "8e9", "2k") parsed exactly, for the
// admission webhook: pods carry VRAM requests in this notation.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/result.h"

namespace gpuslice::node {

// The exact value of a non-negative quantity as an integer; an error for junk, negative values,
// values that are not whole numbers (e.g. "1500m", "0.5") and values above 2^64-1.
Result<std::uint64_t> parse_quantity(std::string_view text);

}  // namespace gpuslice::node
