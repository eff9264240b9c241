#include "node/options.h"

#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "config/settings.h"

namespace gpuslice::node {
namespace {

// A flag table: each entry consumes a value (or none for switches) and may fail with a message.
struct Flag {
  bool takes_value = true;
  const char* env = nullptr;  // environment fallback
  std::function<std::optional<std::string>(const std::string&)> apply;
};

ParseOutcome run_flags(const std::vector<std::string>& args,
                       const std::function<const char*(const char*)>& env, std::map<std::string, Flag>& flags,
                       const std::string& usage) {
  // Environment first, so flags given on the command line override it.
  for (auto& [name, flag] : flags) {
    if (!flag.env) continue;
    const char* value = env(flag.env);
    if (!value || !*value) continue;
    if (auto err = flag.apply(value)) return {false, std::string(flag.env) + ": " + *err};
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
    auto it = flags.find(name);
    if (it == flags.end()) return {false, "unknown flag --" + name + "\n\n" + usage};
    if (it->second.takes_value && !value) {
      if (i + 1 >= args.size()) return {false, "--" + name + " needs a value"};
      value = args[++i];
    }
    if (!it->second.takes_value && value) return {false, "--" + name + " takes no value"};
    if (auto err = it->second.apply(value.value_or(""))) return {false, "--" + name + ": " + *err};
  }
  return {};
}

std::optional<std::string> read_token_file(const std::string& path, std::string& token) {
  std::ifstream in(path);
  if (!in) return "cannot read token file " + path;
  std::ostringstream text;
  text << in.rdbuf();
  token = text.str();
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' '))
    token.pop_back();
  if (token.empty()) return "token file " + path + " is empty";
  return std::nullopt;
}

Flag text_flag(std::string& target, const char* env = nullptr) {
  return {true, env, [&target](const std::string& v) -> std::optional<std::string> {
            target = v;
            return std::nullopt;
          }};
}

Flag log_flag(std::string& target, const char* env) {
  return {true, env, [&target](const std::string& v) -> std::optional<std::string> {
            auto level = config::parse_log_level(v);
            if (!level) return level.error();
            target = v;
            return std::nullopt;
          }};
}

Flag listen_flag(std::string& host, int& port, const char* env) {
  return {true, env, [&host, &port](const std::string& v) -> std::optional<std::string> {
            auto ok = parse_listen(v, host, port);
            if (!ok) return ok.error();
            return std::nullopt;
          }};
}

}  // namespace

Result<std::chrono::milliseconds> parse_duration(std::string_view text) {
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0 || digits > 9)
    return make_error("'" + std::string(text) + "' is not a duration like 500ms, 2s or 1m");
  long long value = std::stoll(std::string(text.substr(0, digits)));
  std::string_view unit = text.substr(digits);
  long long ms = 0;
  if (unit == "ms") {
    ms = value;
  } else if (unit == "s" || unit.empty()) {
    ms = value * 1000;
  } else if (unit == "m") {
    ms = value * 60000;
  } else {
    return make_error("'" + std::string(text) + "' is not a duration like 500ms, 2s or 1m");
  }
  if (ms <= 0) return make_error("duration must be positive");
  return std::chrono::milliseconds(ms);
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

std::string usage_main() {
  return "gpuslice-node: the gpuslice node daemon\n"
         "\n"
         "usage: gpuslice-node <command> [flags]\n"
         "\n"
         "commands:\n"
         "  serve     GPU discovery, /metrics, HTTP API and kubelet device plugin (DaemonSet)\n"
         "  webhook   mutating admission webhook over TLS (also run as 'gpuslice-webhook')\n"
         "  version   print the version\n"
         "\n"
         "Run 'gpuslice-node <command> --help' for the flags of a command.\n";
}

std::string usage_serve() {
  return "usage: gpuslice-node serve [flags]\n"
         "\n"
         "  --root DIR                 host directory of per-container state (GPUSLICE_NODE_ROOT, default "
         "/var/lib/gpuslice)\n"
         "  --listen HOST:PORT         /metrics and API address (GPUSLICE_NODE_LISTEN, default "
         "0.0.0.0:9410)\n"
         "  --token-file FILE          bearer token of the API (GPUSLICE_NODE_TOKEN_FILE; or the token "
         "itself\n"
         "                             in GPUSLICE_NODE_TOKEN). Without a token the API answers 401.\n"
         "  --metrics-auth             require the token on /metrics too\n"
         "  --http-threads N           HTTP worker threads (default 16)\n"
         "  --nvml-library PATH        NVML to dlopen (GPUSLICE_NVML_LIBRARY, default libnvidia-ml.so.1)\n"
         "  --fake-gpus NxSIZE         no NVML: N identical GPUs of SIZE memory, e.g. 2x16Gi (demos)\n"
         "  --allow-no-gpu             keep serving /metrics when NVML cannot be loaded\n"
         "  --scan-interval DURATION   how often state and GPUs are read (default 1s)\n"
         "  --no-device-plugin         do not serve the kubelet device plugin\n"
         "  --device-plugin-dir DIR    kubelet device plugin directory (default "
         "/var/lib/kubelet/device-plugins)\n"
         "  --resources LIST           resources to advertise, of gpu,vram,cores (default all)\n"
         "  --resource-domain NAME     resource name prefix (default gpuslice.io)\n"
         "  --replicas N               gpuslice.io/gpu slots per GPU (default 4)\n"
         "  --vram-unit SIZE           memory per gpuslice.io/vram device (default 1Mi)\n"
         "  --placement binpack|spread how GetPreferredAllocation picks GPUs (default binpack)\n"
         "  --dev-root DIR             where /dev/nvidia* are found on the host (default /dev)\n"
         "  --kubelet-pods-dir DIR     kubelet pods directory, for webhook-injected pods (default\n"
         "                             /var/lib/kubelet/pods; empty to disable)\n"
         "  --log-level LEVEL          error, warn, info, debug, trace (GPUSLICE_LOG_LEVEL, default info)\n";
}

std::string usage_webhook() {
  return "usage: gpuslice-node webhook [flags]   (or: gpuslice-webhook [flags])\n"
         "\n"
         "  --listen HOST:PORT   HTTPS address (GPUSLICE_WEBHOOK_LISTEN, default 0.0.0.0:8443)\n"
         "  --tls-cert FILE      PEM certificate chain (GPUSLICE_WEBHOOK_TLS_CERT, default "
         "/etc/gpuslice/tls/tls.crt)\n"
         "  --tls-key FILE       PEM private key (GPUSLICE_WEBHOOK_TLS_KEY, default "
         "/etc/gpuslice/tls/tls.key)\n"
         "  --root DIR           gpuslice root on the nodes; the library is DIR/lib (GPUSLICE_NODE_ROOT,\n"
         "                       default /var/lib/gpuslice)\n"
         "  --resource-domain N  device plugin resource prefix (default gpuslice.io)\n"
         "  --threads N          worker threads (default 8)\n"
         "  --log-level LEVEL    error, warn, info, debug, trace (GPUSLICE_LOG_LEVEL, default info)\n";
}

ParseOutcome parse_serve_options(const std::vector<std::string>& args,
                                 const std::function<const char*(const char*)>& env, ServeOptions& out) {
  std::map<std::string, Flag> flags;
  flags["root"] = text_flag(out.root, "GPUSLICE_NODE_ROOT");
  flags["listen"] = listen_flag(out.api.host, out.api.port, "GPUSLICE_NODE_LISTEN");
  flags["token-file"] = text_flag(out.token_file, "GPUSLICE_NODE_TOKEN_FILE");
  flags["metrics-auth"] = {false, nullptr, [&out](const std::string&) -> std::optional<std::string> {
                             out.api.metrics_require_token = true;
                             return std::nullopt;
                           }};
  flags["http-threads"] = {true, nullptr, [&out](const std::string& v) -> std::optional<std::string> {
                             if (v.empty() || v.size() > 3 ||
                                 v.find_first_not_of("0123456789") != std::string::npos ||
                                 std::stoi(v) == 0) {
                               return "expected 1-999";
                             }
                             out.api.threads = static_cast<unsigned>(std::stoi(v));
                             return std::nullopt;
                           }};
  flags["nvml-library"] = text_flag(out.nvml_library, "GPUSLICE_NVML_LIBRARY");
  flags["fake-gpus"] = text_flag(out.fake_gpus);
  flags["allow-no-gpu"] = {false, nullptr, [&out](const std::string&) -> std::optional<std::string> {
                             out.allow_no_gpu = true;
                             return std::nullopt;
                           }};
  flags["scan-interval"] = {true, nullptr, [&out](const std::string& v) -> std::optional<std::string> {
                              auto d = parse_duration(v);
                              if (!d) return d.error();
                              out.scan_interval = *d;
                              return std::nullopt;
                            }};
  flags["no-device-plugin"] = {false, nullptr, [&out](const std::string&) -> std::optional<std::string> {
                                 out.device_plugin = false;
                                 return std::nullopt;
                               }};
  flags["device-plugin-dir"] = text_flag(out.plugin.device_plugin_dir);
  flags["resources"] = {true, nullptr, [&out](const std::string& v) -> std::optional<std::string> {
                          out.plugin.resources.clear();
                          std::stringstream list(v);
                          std::string item;
                          while (std::getline(list, item, ',')) {
                            auto kind = parse_resource_kind(item);
                            if (!kind) return "unknown resource '" + item + "' (expected gpu, vram, cores)";
                            out.plugin.resources.push_back(*kind);
                          }
                          if (out.plugin.resources.empty()) return "no resources given";
                          return std::nullopt;
                        }};
  flags["resource-domain"] = text_flag(out.plugin.resource_domain);
  flags["replicas"] = {true, nullptr, [&out](const std::string& v) -> std::optional<std::string> {
                         if (v.empty() || v.size() > 4 ||
                             v.find_first_not_of("0123456789") != std::string::npos || std::stoi(v) == 0) {
                           return "expected 1-9999";
                         }
                         out.plugin.catalog.replicas = static_cast<unsigned>(std::stoi(v));
                         return std::nullopt;
                       }};
  flags["vram-unit"] = {true, nullptr, [&out](const std::string& v) -> std::optional<std::string> {
                          auto size = config::parse_size(v, config::SizeDialect::Native);
                          if (!size) return size.error();
                          if (*size == 0) return "must be positive";
                          out.plugin.catalog.vram_unit = *size;
                          return std::nullopt;
                        }};
  flags["placement"] = {true, nullptr, [&out](const std::string& v) -> std::optional<std::string> {
                          if (v == "binpack") {
                            out.plugin.catalog.placement = Placement::Binpack;
                          } else if (v == "spread") {
                            out.plugin.catalog.placement = Placement::Spread;
                          } else {
                            return "expected binpack or spread";
                          }
                          return std::nullopt;
                        }};
  flags["dev-root"] = text_flag(out.plugin.catalog.dev_root);
  flags["kubelet-pods-dir"] = text_flag(out.kubelet_pods_dir);
  flags["log-level"] = log_flag(out.log_level, "GPUSLICE_LOG_LEVEL");
  ParseOutcome outcome = run_flags(args, env, flags, usage_serve());
  if (outcome.help || !outcome.message.empty()) return outcome;
  // The token itself never comes from a flag: command lines are readable by every local user.
  if (const char* token = env("GPUSLICE_NODE_TOKEN")) out.api.token = token;
  if (!out.token_file.empty()) {
    if (auto err = read_token_file(out.token_file, out.api.token)) return {false, *err};
  }
  return {};
}

ParseOutcome parse_webhook_options(const std::vector<std::string>& args,
                                   const std::function<const char*(const char*)>& env,
                                   WebhookModeOptions& out) {
  out.server.tls_cert_file = "/etc/gpuslice/tls/tls.crt";
  out.server.tls_key_file = "/etc/gpuslice/tls/tls.key";
  std::map<std::string, Flag> flags;
  flags["listen"] = listen_flag(out.server.host, out.server.port, "GPUSLICE_WEBHOOK_LISTEN");
  flags["tls-cert"] = text_flag(out.server.tls_cert_file, "GPUSLICE_WEBHOOK_TLS_CERT");
  flags["tls-key"] = text_flag(out.server.tls_key_file, "GPUSLICE_WEBHOOK_TLS_KEY");
  flags["root"] = text_flag(out.webhook.host_root, "GPUSLICE_NODE_ROOT");
  flags["resource-domain"] = text_flag(out.webhook.resource_domain);
  flags["threads"] = {true, nullptr, [&out](const std::string& v) -> std::optional<std::string> {
                        if (v.empty() || v.size() > 3 ||
                            v.find_first_not_of("0123456789") != std::string::npos || std::stoi(v) == 0) {
                          return "expected 1-999";
                        }
                        out.server.threads = static_cast<unsigned>(std::stoi(v));
                        return std::nullopt;
                      }};
  flags["log-level"] = log_flag(out.log_level, "GPUSLICE_LOG_LEVEL");
  return run_flags(args, env, flags, usage_webhook());
}

}  // namespace gpuslice::node
