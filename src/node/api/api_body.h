// Request bodies of the HTTP API, read as untrusted input: size, nesting depth and duplicate keys
// are checked before the body's meaning is (parse_limits_request).
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

#include "node/api/limits_api.h"

namespace gpuslice::node {

inline constexpr std::size_t kMaxApiBodyBytes = std::size_t{64} * 1024;

// PUT/POST /api/v1/containers/<id>/limits. 413 when over kMaxApiBodyBytes, 400 when not one JSON
// document within kMaxJsonDepth levels with every key given once, else what parse_limits_request says.
std::optional<ApiError> read_limits_body(std::string_view body, LimitsUpdate& out);

}  // namespace gpuslice::node
