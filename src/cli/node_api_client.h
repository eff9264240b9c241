// Reads the node daemon's GET /api/v1/status over plain HTTP with its bearer token: a small
// blocking client with a deadline and bounded response size and JSON depth.
#pragma once

#include <string>

#include "cli/status_source.h"
#include "common/result.h"

namespace gpuslice::cli {

inline constexpr std::size_t kMaxApiResponseBytes = 32u << 20;
inline constexpr int kMaxApiJsonDepth = 64;
inline constexpr int kApiTimeoutMs = 5000;

// GET `path` from `url` (http://HOST:PORT) with "Authorization: Bearer <token>"; the body of a 200.
// The connection must be made within `connect_timeout_ms` (the whole request within kApiTimeoutMs);
// `unreachable`, when given, tells whether the failure was that no connection was made.
Result<std::string> http_get(const std::string& url, const std::string& path, const std::string& token,
                             int connect_timeout_ms = kApiTimeoutMs, bool* unreachable = nullptr);

// The daemon's status document turned into containers and GPUs.
Result<StatusView> parse_node_status(const std::string& body);

// The daemon's status; `connect_timeout_ms` and `unreachable` as for http_get.
StatusView read_node_api(const NodeApi& api, int connect_timeout_ms = kApiTimeoutMs,
                         bool* unreachable = nullptr);

}  // namespace gpuslice::cli
