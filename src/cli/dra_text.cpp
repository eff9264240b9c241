#include "cli/dra_text.h"

#include "cli/terminal_text.h"

namespace gpuslice::cli {
namespace {

using nlohmann::json;

// Each reader: true when `key` is absent (the default stays) or of the right type; false otherwise.
bool read_bool(const json& o, const char* key, bool& out) {
  auto it = o.find(key);
  if (it == o.end()) return true;
  if (!it->is_boolean()) return false;
  out = it->get<bool>();
  return true;
}

bool read_count(const json& o, const char* key, std::uint64_t& out) {
  auto it = o.find(key);
  if (it == o.end()) return true;
  if (!it->is_number_unsigned()) return false;
  out = it->get<std::uint64_t>();
  return true;
}

bool read_text(const json& o, const char* key, std::optional<std::string>& out) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return true;
  if (!it->is_string()) return false;
  out = it->get<std::string>();
  return true;
}

json text_or_null(const std::optional<std::string>& text) { return text ? json(*text) : json(nullptr); }

}  // namespace

Result<DraSummary> dra_from_json(const json& doc) {
  if (!doc.is_object()) return make_error("dra is not an object");
  DraSummary d;
  auto bad = [](const char* field) {
    return make_error(std::string("dra.") + field + " is of the wrong type");
  };
  if (!read_bool(doc, "leader", d.leader)) return bad("leader");
  if (!read_bool(doc, "published", d.published)) return bad("published");
  if (!read_text(doc, "layout", d.layout)) return bad("layout");
  if (!read_bool(doc, "fractions_schedulable", d.fractions_schedulable)) return bad("fractions_schedulable");
  if (!read_bool(doc, "whole_gpu_devices", d.whole_gpu_devices)) return bad("whole_gpu_devices");
  if (auto it = doc.find("degraded"); it != doc.end() && !it->is_null()) {
    if (!it->is_object() || !read_text(*it, "reason", d.degraded_reason) ||
        !read_text(*it, "message", d.degraded_message) || !d.degraded_reason)
      return bad("degraded");
    if (!d.degraded_message) d.degraded_message = "";
  }
  if (!read_count(doc, "node_events", d.node_events)) return bad("node_events");
  if (!read_text(doc, "node_event_error", d.node_event_error)) return bad("node_event_error");
  if (!read_count(doc, "pool_generation", d.pool_generation)) return bad("pool_generation");
  if (auto it = doc.find("publishing"); it != doc.end() && !it->is_null()) {
    const json& p = *it;
    if (!p.is_object()) return bad("publishing");
    if (!read_bool(p, "failing", d.failing)) return bad("publishing.failing");
    if (!read_text(p, "cause", d.cause)) return bad("publishing.cause");
    if (!read_text(p, "error", d.error)) return bad("publishing.error");
    if (!read_count(p, "failures", d.failures)) return bad("publishing.failures");
    if (!read_count(p, "consecutive_failures", d.consecutive_failures))
      return bad("publishing.consecutive_failures");
    if (!read_count(p, "next_retry_ms", d.next_retry_ms)) return bad("publishing.next_retry_ms");
  }
  return d;
}

json dra_json(const DraSummary& d) {
  return {{"leader", d.leader},
          {"published", d.published},
          {"layout", text_or_null(d.layout)},
          {"fractions_schedulable", d.fractions_schedulable},
          {"whole_gpu_devices", d.whole_gpu_devices},
          {"degraded", d.degraded_reason ? json{{"reason", *d.degraded_reason},
                                                {"message", d.degraded_message.value_or("")}}
                                         : json(nullptr)},
          {"node_events", d.node_events},
          {"node_event_error", text_or_null(d.node_event_error)},
          {"pool_generation", d.pool_generation},
          {"publishing",
           {{"failing", d.failing},
            {"cause", text_or_null(d.cause)},
            {"error", text_or_null(d.error)},
            {"failures", d.failures},
            {"consecutive_failures", d.consecutive_failures},
            {"next_retry_ms", d.next_retry_ms}}}};
}

void print_dra_text(const DraSummary& d, std::FILE* out) {
  std::string line = "DRA: ";
  if (!d.leader) {
    line += "not publishing (another daemon of this node holds the Lease, or it is being taken)";
  } else if (d.published) {
    line += "leader, ResourceSlices published (pool generation " + std::to_string(d.pool_generation) + ")";
  } else {
    line += "leader, ResourceSlices not published yet";
  }
  line += ", layout " + (d.layout ? terminal_text(*d.layout, 40) : std::string("not yet known"));
  line += d.whole_gpu_devices ? ", whole-GPU devices" : ", no whole-GPU devices";
  std::fprintf(out, "%s\n", line.c_str());
  if (d.degraded_reason) {
    std::fprintf(out, "  degraded (%s): %s\n", terminal_text(*d.degraded_reason, 128).c_str(),
                 terminal_text(d.degraded_message.value_or(""), 1024).c_str());
  } else if (!d.fractions_schedulable) {
    std::fprintf(out, "  fractions of a GPU are not schedulable: each GPU goes to one claim\n");
  }
  if (d.failing) {
    char wait[32];
    std::snprintf(wait, sizeof wait, "%.1f s", static_cast<double>(d.next_retry_ms) / 1000.0);
    std::fprintf(out, "  publishing FAILING (%s, %llu in a row, %llu in all; next try in %s): %s\n",
                 terminal_text(d.cause.value_or("error"), 40).c_str(),
                 static_cast<unsigned long long>(d.consecutive_failures),
                 static_cast<unsigned long long>(d.failures), wait,
                 terminal_text(d.error.value_or(""), 600).c_str());
  } else if (d.failures > 0) {
    std::fprintf(out, "  publishing: working (%llu failed round(s) since the daemon started)\n",
                 static_cast<unsigned long long>(d.failures));
  }
  if (d.node_events > 0 || d.node_event_error) {
    std::string events = "  Events on the Node: " + std::to_string(d.node_events) + " written";
    if (d.node_event_error) events += "; the last one was not: " + terminal_text(*d.node_event_error, 400);
    std::fprintf(out, "%s\n", events.c_str());
  }
}

}  // namespace gpuslice::cli
