#include "node/limits_api.h"

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "config/settings.h"

namespace gpuslice::node {
namespace {

using nlohmann::json;

// Turns one JSON value into the text form of SPEC §2 and checks it with the shared grammar.
std::optional<ApiError> value_text(const json& value, const char* field, config::ValueKind kind,
                                   std::string& out) {
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
  auto parsed = config::parse_device_values(out, kind, config::SizeDialect::Native);
  if (!parsed) return ApiError{400, std::string("'") + field + "': " + parsed.error()};
  if (parsed->empty()) return ApiError{400, std::string("'") + field + "' has no value"};
  return std::nullopt;
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
    if (auto err = value_text(doc["memory"], "memory", config::ValueKind::Size, text)) return err;
    out.memory = std::move(text);
  }
  if (doc.contains("compute")) {
    std::string text;
    if (auto err = value_text(doc["compute"], "compute", config::ValueKind::Percent, text)) return err;
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
  auto current = read_limits_file(layout.limits_file(id));
  if (!current) return ApiError{500, current.error()};
  Limits limits = std::move(current).value();
  if (update.memory) limits.memory = update.memory;
  if (update.compute) limits.compute = update.compute;
  auto written = write_file_atomically(layout.limits_file(id), render_limits(limits));
  if (!written) return ApiError{500, written.error()};
  out.limits = limits;

  std::string state = layout.state_file(id);
  if (::stat(state.c_str(), &st) != 0) return std::nullopt;  // nothing running yet: the file is enough
  auto ledger = opener ? opener(state) : shm::Ledger::open(state, shm::Ledger::Mode::Observer);
  if (!ledger) {
    out.ledger_error = ledger.error();
    return std::nullopt;
  }
  std::optional<config::DeviceValues> memory, compute;
  if (update.memory) {
    memory = config::parse_device_values(*update.memory, config::ValueKind::Size, config::SizeDialect::Native)
                 .value();
  }
  if (update.compute) {
    compute =
        config::parse_device_values(*update.compute, config::ValueKind::Percent, config::SizeDialect::Native)
            .value();
  }
  shm::Snapshot snap = (*ledger)->snapshot();
  for (const shm::DeviceRow& row : snap.devices) {
    const int record = row.record >= 0 ? row.record : (*ledger)->find_device(row.uuid);
    if (record < 0) {
      out.ledger_error = "device " + row.uuid + " vanished from " + state;
      continue;
    }
    bool touched = false;
    if (memory) {
      if (auto bytes = memory->lookup(row.index, row.uuid)) {
        (*ledger)->set_quota(record, *bytes);
        touched = true;
      }
    }
    if (compute) {
      if (auto percent = compute->lookup(row.index, row.uuid)) {
        (*ledger)->set_compute_limit(record, static_cast<unsigned>(*percent));
        touched = true;
      }
    }
    if (touched) ++out.devices_updated;
  }
  return std::nullopt;
}

}  // namespace gpuslice::node
