#include "node/startup/flag_table.h"

#include <algorithm>
#include <initializer_list>

#include "common/duration_scan.h"
#include "config/default_paths.h"
#include "config/settings.h"
#include "node/admission/webhook.h"
#include "node/api/http_api.h"
#include "node/http/bounded_server.h"

namespace gpuslice::node {
namespace {

const char* const kLogLevels = "error, warn, info, debug, trace";

Apply set_log_level(std::string& target) {
  return [&target](const std::string& v) -> std::optional<std::string> {
    auto level = config::parse_log_level(v);
    if (!level) return level.error();
    target = v;
    return std::nullopt;
  };
}

}  // namespace

std::string usage_of(const std::string& head, const std::vector<Flag>& flags) {
  std::string out = head + "\n";
  std::size_t width = 0;
  for (const Flag& f : flags) {
    width = std::max(width, std::string(f.name).size() + (f.value ? std::string(f.value).size() + 1 : 0));
  }
  for (const Flag& f : flags) {
    std::string left = std::string("--") + f.name + (f.value ? std::string(" ") + f.value : "");
    std::string notes;
    if (f.env) notes = f.env;
    if (f.fallback)
      notes += std::string(notes.empty() ? "" : ", ") + "default " + (*f.fallback ? f.fallback : "empty");
    out += "  " + left + std::string(width + 4 - left.size(), ' ') + f.help;
    if (!notes.empty()) out += " (" + notes + ")";
    out += "\n";
  }
  return out;
}

ParseOutcome run_flags(const std::vector<std::string>& args, const EnvLookup& env,
                       const std::vector<Flag>& flags, const std::string& usage) {
  for (const Flag& f : flags) {
    if (!f.fallback) continue;
    if (auto err = f.apply(f.fallback)) return {false, std::string("default of --") + f.name + ": " + *err};
  }
  // Environment next, so flags given on the command line override it.
  for (const Flag& f : flags) {
    if (!f.env) continue;
    const char* value = env(f.env);
    if (!value || !*value) continue;
    if (auto err = f.apply(value)) return {false, std::string(f.env) + ": " + *err};
  }
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "-h" || arg == "--help") return {true, usage};
    if (arg.rfind("--", 0) != 0) return {false, "unexpected argument '" + arg + "'\n\n" + usage};
    std::string name = arg.substr(2);
    std::optional<std::string> value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const Flag* flag = nullptr;
    for (const Flag& f : flags) {
      if (name == f.name) flag = &f;
    }
    if (!flag) return {false, "unknown flag --" + name + "\n\n" + usage};
    if (flag->value && !value) {
      if (i + 1 >= args.size()) return {false, "--" + name + " needs a value"};
      value = args[++i];
    }
    if (!flag->value && value) return {false, "--" + name + " takes no value"};
    if (auto err = flag->apply(value.value_or(""))) return {false, "--" + name + ": " + *err};
  }
  return {};
}

Apply set_text(std::string& target) {
  return [&target](const std::string& v) -> std::optional<std::string> {
    target = v;
    return std::nullopt;
  };
}

Apply set_switch(bool& target, bool value) {
  return [&target, value](const std::string&) -> std::optional<std::string> {
    target = value;
    return std::nullopt;
  };
}

Apply set_duration(std::chrono::milliseconds& target) {
  return [&target](const std::string& v) -> std::optional<std::string> {
    auto d = parse_duration(v);
    if (!d) return d.error();
    target = *d;
    return std::nullopt;
  };
}

// The webhook's priority policy flags (webhook.h), for each mode that applies it.
Apply set_namespace_list(std::vector<std::string>& target) {
  return [&target](const std::string& v) -> std::optional<std::string> {
    auto parsed = parse_namespace_list(v);
    if (!parsed) return parsed.error();
    target = *parsed;
    return std::nullopt;
  };
}

Apply set_priority_classes(PriorityPolicy& target) {
  return [&target](const std::string& v) -> std::optional<std::string> {
    auto parsed = parse_priority_classes(v);
    if (!parsed) return parsed.error();
    target.priority_classes = *parsed;
    return std::nullopt;
  };
}

Apply set_listen(std::string& host, int& port) {
  return [&host, &port](const std::string& v) -> std::optional<std::string> {
    auto ok = parse_listen(v, host, port);
    if (!ok) return ok.error();
    return std::nullopt;
  };
}

// A duration, or 0 for "never".
Apply set_duration_or_zero(std::chrono::milliseconds& target) {
  return [&target](const std::string& v) -> std::optional<std::string> {
    if (v == "0") {
      target = std::chrono::milliseconds(0);
      return std::nullopt;
    }
    auto d = parse_duration(v);
    if (!d) return d.error();
    target = *d;
    return std::nullopt;
  };
}

Flag log_level_flag(std::string& target) {
  return {"log-level", "LEVEL", "GPUSLICE_LOG_LEVEL", "info", kLogLevels, set_log_level(target)};
}

std::vector<Flag> api_flags(ApiOptions& api, const char* token_file_help) {
  return {
      {"listen", "HOST:PORT", "GPUSLICE_NODE_LISTEN", config::kDefaultNodeListen, "/metrics and API address",
       set_listen(api.host, api.port)},
      {"token-file", "FILE", "GPUSLICE_NODE_TOKEN_FILE", nullptr, token_file_help, set_text(api.token_file)}};
}

std::vector<Flag> limit_flags(ServerLimits& limits, const LimitFlagNames& names,
                              const char* threads_default) {
  return {
      {names.threads, "N", nullptr, threads_default, "connections served at once, one thread each",
       set_number(limits.max_connections, 1, 4096)},
      {names.per_client, "N", nullptr, "32", "connections served at once per client address",
       set_number(limits.max_connections_per_client, 1, 4096)},
      {names.request_timeout, "DURATION", nullptr, "10s", "time a client has to send a whole request",
       set_duration(limits.request_timeout)},
  };
}

std::vector<Flag> joined(std::initializer_list<std::vector<Flag>> parts) {
  std::vector<Flag> all;
  for (const auto& part : parts) all.insert(all.end(), part.begin(), part.end());
  return all;
}

std::vector<Flag> mps_flags(MpsOptions& out) {
  return {{"mps", nullptr, nullptr, nullptr,
           "run the node's MPS control daemon (nvidia-cuda-mps-control -d), restart it when it ends, and "
           "hand its pipe directory to every container (docs/mps.md)",
           set_switch(out.enabled, true)},
          {"mps-dir", "DIR", "GPUSLICE_MPS_DIR", "/run/gpuslice/mps",
           "root-owned runtime directory of the MPS daemon: DIR/pipe (CUDA_MPS_PIPE_DIRECTORY), DIR/log",
           set_text(out.root)},
          {"mps-binary", "PATH", nullptr, "nvidia-cuda-mps-control",
           "the MPS control program (a name looked up on PATH)", set_text(out.binary)}};
}

ParseOutcome parse_mode_flags(const std::vector<std::string>& args, const EnvLookup& env,
                              const std::vector<Flag>& flags, const char* head) {
  return run_flags(args, env, flags, usage_of(head, flags));
}

void take_api_token(const EnvLookup& env, std::string& token) {
  if (const char* value = env("GPUSLICE_NODE_TOKEN")) token = value;
}

Result<std::chrono::milliseconds> parse_duration(std::string_view text) {
  // A bare number is seconds; no blanks, and at most 9 digits (leading zeros included).
  static constexpr text::DurationUnit kUnits[] = {{"ms", 1}, {"s", 1000}, {"", 1000}, {"m", 60000}};
  const text::DurationScan scan = text::scan_duration(text, kUnits, text::Blanks::NotAllowed);
  if (scan.status != text::DurationScan::Status::Ok || scan.digits > 9)
    return make_error("'" + std::string(text) + "' is not a duration like 500ms, 2s or 1m");
  if (scan.value == 0) return make_error("duration must be positive");
  // At most 999999999 minutes in milliseconds: far inside the representation.
  return std::chrono::milliseconds(static_cast<std::chrono::milliseconds::rep>(scan.value));
}

Result<bool> parse_listen(std::string_view text, std::string& host, int& port) {
  std::size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) return make_error("'" + std::string(text) + "' is not HOST:PORT");
  std::string_view port_text = text.substr(colon + 1);
  if (port_text.empty() || port_text.size() > 5 ||
      port_text.find_first_not_of("0123456789") != std::string_view::npos) {
    return make_error("bad port in '" + std::string(text) + "'");
  }
  int value = std::stoi(std::string(port_text));
  if (value > 65535) return make_error("port out of range in '" + std::string(text) + "'");
  std::string_view h = text.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  host = h.empty() ? "0.0.0.0" : std::string(h);
  port = value;
  return true;
}

}  // namespace gpuslice::node
