// The node daemon's DRA driver as `gpuslice status --node` / `--api` shows it: the "dra" object of
// the daemon's GET /api/v1/status (docs/api.md; present when it runs `gpuslice-node dra` and
// publishes ResourceSlices), read back, printed as text and written again as JSON.
#pragma once

#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/result.h"

namespace gpuslice::cli {

struct DraSummary {
  bool leader = false;
  bool published = false;
  std::optional<std::string> layout;  // null until the API server's layout was found
  bool fractions_schedulable = true;
  bool whole_gpu_devices = true;
  std::optional<std::string> degraded_reason, degraded_message;  // both or neither
  std::uint64_t node_events = 0;
  std::optional<std::string> node_event_error;
  std::uint64_t pool_generation = 0;
  bool failing = false;
  std::optional<std::string> cause, error;
  std::uint64_t failures = 0, consecutive_failures = 0, next_retry_ms = 0;
};

// The API's "dra" object; an error names the field that is missing or of the wrong type. Fields a
// newer daemon adds are ignored.
Result<DraSummary> dra_from_json(const nlohmann::json& doc);
// The same object again (the schema of the API's "dra"), for `status --json`.
nlohmann::json dra_json(const DraSummary& dra);

// "DRA: leader, published ..., layout ..." and a line per trouble (a poorer layout, failing
// publishes, Events not written). The text comes from the API server and the daemon and is escaped.
void print_dra_text(const DraSummary& dra, std::FILE* out);

}  // namespace gpuslice::cli
