#include "node/dra/claim_config.h"

#include <nlohmann/json.hpp>

#include "config/text_util.h"
#include "node/admission/quantity.h"
#include "node/http/untrusted_json.h"

namespace gpuslice::node::dra {
namespace {

using nlohmann::json;

std::string shown_value(const json& value) {
  return config::detail::printable(
      value.is_string() ? "\"" + value.get<std::string>() + "\"" : json_text(value), 80);
}

Result<std::uint64_t> bytes_of(const json& value, const std::string& field) {
  // A Kubernetes quantity as a string ("8Gi") or a whole number of bytes.
  if (value.is_number_unsigned()) {
    if (value.get<std::uint64_t>() == 0) return make_error(field + ": must be more than 0 bytes");
    return value.get<std::uint64_t>();
  }
  if (!value.is_string())
    return make_error(field + ": " + shown_value(value) + " is not a quantity like \"8Gi\"");
  auto parsed = parse_quantity(value.get<std::string>());
  if (!parsed)
    return make_error(field + ": " + shown_value(value) + " is not a quantity like \"8Gi\" (" +
                      parsed.error() + ")");
  if (*parsed == 0) return make_error(field + ": must be more than 0 bytes");
  return *parsed;
}

Result<unsigned> percent_of(const json& value, const std::string& field) {
  std::uint64_t n = 0;
  if (value.is_number_unsigned()) {
    n = value.get<std::uint64_t>();
  } else if (value.is_string()) {
    std::string text = value.get<std::string>();
    if (!text.empty() && text.back() == '%') text.pop_back();
    if (text.empty() || text.size() > 3 || text.find_first_not_of("0123456789") != std::string::npos)
      return make_error(field + ": " + shown_value(value) + " is not a percentage from 1 to 100");
    n = std::stoul(text);
  } else {
    return make_error(field + ": " + shown_value(value) + " is not a percentage from 1 to 100");
  }
  if (n < 1 || n > 100)
    return make_error(field + ": " + shown_value(value) + " is not a percentage from 1 to 100");
  return static_cast<unsigned>(n);
}

// Reads {"request": ..., "limit": ...} with `read` for each value; request <= limit.
template <class T, class Read>
std::optional<std::string> request_limit(const json& doc, const char* name, Read read,
                                         std::optional<T>& request, std::optional<T>& limit) {
  auto it = doc.find(name);
  if (it == doc.end()) return std::nullopt;
  if (!it->is_object()) return std::string(name) + ": expected an object with request and/or limit";
  for (const auto& [key, value] : it->items()) {
    const std::string field = std::string(name) + "." + key;
    if (key != "request" && key != "limit") return field + ": unknown field (expected request, limit)";
    auto parsed = read(value, field);
    if (!parsed) return parsed.error();
    (key == "request" ? request : limit) = *parsed;
  }
  if (request && limit && *request > *limit) return std::string(name) + ": request is above limit";
  return std::nullopt;
}

}  // namespace

const char* pressure_policy_name(PressurePolicy policy) {
  switch (policy) {
    case PressurePolicy::Fail:
      return "fail";
  }
  return "unknown";
}

Result<ClaimConfig> parse_claim_config(std::string_view text) {
  if (text.size() > kMaxConfigBytes)
    return make_error("parameters: " + std::to_string(text.size()) + " bytes, more than the " +
                      std::to_string(kMaxConfigBytes) + " accepted");
  json doc;
  if (auto err = parse_untrusted_json(text, doc, kMaxConfigDepth)) return make_error("parameters: " + *err);
  if (!doc.is_object()) return make_error("parameters: expected a JSON object");

  ClaimConfig out;
  for (const auto& [key, value] : doc.items()) {
    if (key == "apiVersion") {
      if (value != kConfigApiVersion)
        return make_error("apiVersion: " + shown_value(value) + " (expected \"" + kConfigApiVersion + "\")");
    } else if (key == "kind") {
      if (value != kConfigKind)
        return make_error("kind: " + shown_value(value) + " (expected \"" + kConfigKind + "\")");
    } else if (key == "memory" || key == "compute") {
      // Read below, in a fixed order.
    } else if (key == "priority") {
      if (!value.is_string())
        return make_error("priority: " + shown_value(value) + " (expected high, normal or low)");
      auto level = config::parse_priority(value.get<std::string>());
      if (!level) return make_error("priority: " + shown_value(value) + " (expected high, normal or low)");
      out.priority = *level;
    } else if (key == "onPressure") {
      if (value != "fail") return make_error("onPressure: " + shown_value(value) + " (expected \"fail\")");
      out.on_pressure = PressurePolicy::Fail;
    } else {
      return make_error(config::detail::printable(key, 64) +
                        ": unknown field (expected apiVersion, kind, memory, compute, priority, onPressure)");
    }
  }
  if (doc.find("apiVersion") == doc.end() || doc.find("kind") == doc.end())
    return make_error(std::string("parameters: apiVersion \"") + kConfigApiVersion + "\" and kind \"" +
                      kConfigKind + "\" are required");
  if (auto err = request_limit<std::uint64_t>(doc, "memory", bytes_of, out.memory_request, out.memory_limit))
    return make_error(*err);
  if (auto err = request_limit<unsigned>(doc, "compute", percent_of, out.compute_request, out.compute_limit))
    return make_error(*err);
  return out;
}

}  // namespace gpuslice::node::dra
