#include "node/api/limits_api.h"

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "config/limits_file.h"

namespace gpuslice::node {
namespace {

using nlohmann::json;

// Turns one JSON value into the text a limits file holds and checks it with the library's parser.
std::optional<ApiError> value_text(const json& value, const char* field, const char* key, std::string& out) {
  if (value.is_string()) {
    out = value.get<std::string>();
  } else if (value.is_number_unsigned()) {
    out = std::to_string(value.get<std::uint64_t>());
  } else if (value.is_object()) {
    out = value.dump();
  } else {
    return ApiError{400,
                    std::string("'") + field + "' must be a string, a non-negative integer or an object"};
  }
  auto parsed = config::parse_limit_value(key, out);
  if (!parsed) return ApiError{400, std::string("'") + field + "': " + parsed.error()};
  return std::nullopt;
}

// Sets the caps of `limits` on each device of the container's ledger at `state`, as every process of
// the container applies them when it notices the new file; the container's own requests stay, and
// the smaller of the two applies.
void apply_to_ledger(const std::string& state, const Limits& limits, const LedgerOpener& opener,
                     LimitsApplied& out) {
  struct stat st {};
  if (::lstat(state.c_str(), &st) != 0) return;  // nothing running yet: the file is enough
  auto ledger = opener ? opener(state) : shm::Ledger::open(state, shm::Ledger::Mode::Observer);
  if (!ledger) {
    out.ledger_error = ledger.error();
    return;
  }
  config::DeviceValues memory, compute;
  if (limits.memory) memory = config::parse_limit_value(config::kMemoryLimitKey, *limits.memory)->values;
  if (limits.compute) compute = config::parse_limit_value(config::kComputeLimitKey, *limits.compute)->values;
  shm::Snapshot snap = (*ledger)->snapshot();
  for (const shm::DeviceRow& row : snap.devices) {
    const int record = row.record >= 0 ? row.record : (*ledger)->find_device(row.uuid);
    if (record < 0) {
      out.ledger_error = "device " + row.uuid + " vanished from " + state;
      continue;
    }
    shm::DeviceLimits caps;
    if (auto bytes = memory.lookup(row.index, row.uuid)) caps.quota = *bytes;
    if (auto percent = compute.lookup(row.index, row.uuid)) caps.compute = static_cast<unsigned>(*percent);
    (*ledger)->set_caps(record, caps);
    ++out.devices_updated;
  }
}

}  // namespace

std::optional<ApiError> parse_limits_request(std::string_view body, LimitsUpdate& out) {
  json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return ApiError{400, "request body is not valid JSON"};
  if (!doc.is_object()) return ApiError{400, "request body must be a JSON object"};
  for (const auto& [key, value] : doc.items()) {
    if (key != "memory" && key != "compute") {
      return ApiError{400, "unknown field '" + key + "' (expected 'memory' and/or 'compute')"};
    }
  }
  if (doc.contains("memory")) {
    std::string text;
    if (auto err = value_text(doc["memory"], "memory", config::kMemoryLimitKey, text)) return err;
    out.memory = std::move(text);
  }
  if (doc.contains("compute")) {
    std::string text;
    if (auto err = value_text(doc["compute"], "compute", config::kComputeLimitKey, text)) return err;
    out.compute = std::move(text);
  }
  if (!out.memory && !out.compute) return ApiError{400, "nothing to set: give 'memory' and/or 'compute'"};
  return std::nullopt;
}

std::optional<ApiError> apply_limits(const HostLayout& layout, const std::string& id,
                                     const LimitsUpdate& update, const LedgerOpener& opener,
                                     LimitsApplied& out) {
  if (!valid_container_id(id)) return ApiError{400, "invalid container id '" + id + "'"};
  struct stat st {};
  if (::stat(layout.container_dir(id).c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return ApiError{404, "no container '" + id + "' on this node"};
  }
  // The ledger takes the caps under the file's lock: two PUTs at once then reach the ledger in the
  // order they wrote the file, so the ledger cannot end up with the looser cap the file no longer says.
  auto written = update_limits_file(
      layout.limits_file(id),
      [&update](Limits& limits) {
        if (update.memory) limits.memory = update.memory;
        if (update.compute) limits.compute = update.compute;
      },
      [&](const Limits& limits) { apply_to_ledger(layout.state_file(id), limits, opener, out); });
  if (!written) return ApiError{500, written.error()};
  out.limits = std::move(written).value();
  return std::nullopt;
}

}  // namespace gpuslice::node
