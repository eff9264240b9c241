// Setting a container's limits from the HTTP API: validation of the request body (with the
// library's own parser), the locked, atomic rewrite of the read-only limits file and the live
// update of the caps in the container's ledger.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "node/host/host_layout.h"
#include "node/host/limits_file.h"
#include "node/node_view/collector.h"

namespace gpuslice::node {

struct ApiError {
  int status = 500;  // HTTP status to answer with
  std::string message;
};

struct LimitsUpdate {
  std::optional<std::string> memory;  // validated: config::parse_limit_value accepts it
  std::optional<std::string> compute;
};

// Body: {"memory": "8Gi" | 8589934592 | "0=8Gi,1=4Gi" | {"GPU-…": "8Gi"}, "compute": 30 | "30" | …};
// at least one of the two, no other keys. Values are checked as the limits file's are.
std::optional<ApiError> parse_limits_request(std::string_view body, LimitsUpdate& out);

struct LimitsApplied {
  Limits limits;             // the file's content after the update
  int devices_updated = 0;   // device records of the live ledger that took the new values
  std::string ledger_error;  // the file was written but the live state could not be updated
};

// Writes <root>/containers/<id>/config/limits (keeping the value not being changed) and, where the
// container has a state file, sets the file's caps on each of its devices through the ledger.
// 404 when the container directory does not exist.
std::optional<ApiError> apply_limits(const HostLayout& layout, const std::string& id,
                                     const LimitsUpdate& update, const LedgerOpener& opener,
                                     LimitsApplied& out);

}  // namespace gpuslice::node
