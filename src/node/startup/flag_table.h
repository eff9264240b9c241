// The command line and environment of every gpuslice-node mode. Flags win over environment
// variables, which win over the defaults. Each flag is declared once, in its mode's file (name,
// value, environment variable, default and help), from which parsing, validation and the usage text
// all come; this is the table's machinery and the flags several modes share.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace gpuslice::node {

struct ApiOptions;      // api/http_api.h
struct PriorityPolicy;  // admission/webhook.h
struct ServerLimits;    // http/bounded_server.h

using EnvLookup = std::function<const char*(const char*)>;

// Either options to run with, or a message for the user (help text when `help` is set).
struct ParseOutcome {
  bool help = false;
  std::string message;
};

Result<std::chrono::milliseconds> parse_duration(std::string_view text);
// "HOST:PORT" or ":PORT" (all interfaces).
Result<bool> parse_listen(std::string_view text, std::string& host, int& port);

// Checks a value and stores it; the message on failure names what was expected.
using Apply = std::function<std::optional<std::string>(const std::string&)>;

struct Flag {
  const char* name;      // without the leading "--"
  const char* value;     // placeholder in the usage text; nullptr for a switch
  const char* env;       // environment variable, or nullptr
  const char* fallback;  // default, applied like a given value; nullptr for none
  const char* help;
  Apply apply;
};

std::string usage_of(const std::string& head, const std::vector<Flag>& flags);
// Defaults, then the environment, then `args` (without the program name and the mode).
ParseOutcome run_flags(const std::vector<std::string>& args, const EnvLookup& env,
                       const std::vector<Flag>& flags, const std::string& usage);
std::vector<Flag> joined(std::initializer_list<std::vector<Flag>> parts);
// run_flags with the usage text made from the same table under `head`.
ParseOutcome parse_mode_flags(const std::vector<std::string>& args, const EnvLookup& env,
                              const std::vector<Flag>& flags, const char* head);
// A mode's usage text: its table over scratch options.
template <class Options>
std::string mode_usage(const char* head, std::vector<Flag> (*flags)(Options&)) {
  Options scratch;
  return usage_of(head, flags(scratch));
}
// The API's bearer token, from GPUSLICE_NODE_TOKEN when set, never from a flag: command lines are
// readable by every local user.
void take_api_token(const EnvLookup& env, std::string& token);

Apply set_text(std::string& target);
Apply set_switch(bool& target, bool value);
Apply set_duration(std::chrono::milliseconds& target);
Apply set_duration_or_zero(std::chrono::milliseconds& target);  // a duration, or 0 for "never"
Apply set_listen(std::string& host, int& port);
Apply set_namespace_list(std::vector<std::string>& target);
Apply set_priority_classes(PriorityPolicy& target);

// The one whole-number validator: decimal digits only, within [min, max].
template <class T>
Apply set_number(T& target, unsigned long min, unsigned long max) {
  return [&target, min, max](const std::string& v) -> std::optional<std::string> {
    const std::string range =
        "expected a whole number from " + std::to_string(min) + " to " + std::to_string(max);
    if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos) return range;
    const unsigned long n = std::stoul(v);
    if (n < min || n > max) return range;
    target = static_cast<T>(n);
    return std::nullopt;
  };
}

// --log-level, the same in every mode.
Flag log_level_flag(std::string& target);

// --listen and --token-file of the daemon's /metrics and API (serve and dra).
std::vector<Flag> api_flags(ApiOptions& api, const char* token_file_help);

// The connection limits of a BoundedServer: the daemon's API and the webhook take the same flags
// under their own names.
struct LimitFlagNames {
  const char* threads;
  const char* per_client;
  const char* request_timeout;
};
std::vector<Flag> limit_flags(ServerLimits& limits, const LimitFlagNames& names, const char* threads_default);

// --mps: the node's MPS control daemon, run by this daemon (node/mps/manager.h), its pipe directory
// handed to every gpuslice container; the same flags for serve and dra.
struct MpsOptions {
  bool enabled = false;
  std::string root;    // --mps-dir: pipe/ and log/ under it
  std::string binary;  // --mps-binary
};
std::vector<Flag> mps_flags(MpsOptions& out);

}  // namespace gpuslice::node
