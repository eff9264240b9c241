#include "node/startup/flag_table.h"

#include <functional>
#include <initializer_list>
#include <sstream>

#include "common/duration_scan.h"
#include "config/default_paths.h"
#include "config/settings.h"
#include "node/dra/claim_reader.h"

namespace gpuslice::node {
namespace {

// Our own table rather than CLI11: the daemon keeps its exact precedence (default < environment
// < flag, with the variable named in the error) and messages, a default is applied through the same
// validator as a user's value (so the help text cannot drift from the code), and no new build
// dependency is needed for it.
using Apply = std::function<std::optional<std::string>(const std::string&)>;

struct Flag {
  const char* name;      // without the leading "--"
  const char* value;     // placeholder in the usage text; nullptr for a switch
  const char* env;       // environment variable, or nullptr
  const char* fallback;  // default, applied like a given value; nullptr for none
  const char* help;
  Apply apply;
};

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

ParseOutcome run_flags(const std::vector<std::string>& args,
                       const std::function<const char*(const char*)>& env, const std::vector<Flag>& flags,
                       const std::string& usage) {
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

Apply set_duration(std::chrono::milliseconds& target) {
  return [&target](const std::string& v) -> std::optional<std::string> {
    auto d = parse_duration(v);
    if (!d) return d.error();
    target = *d;
    return std::nullopt;
  };
}

Apply set_log_level(std::string& target) {
  return [&target](const std::string& v) -> std::optional<std::string> {
    auto level = config::parse_log_level(v);
    if (!level) return level.error();
    target = v;
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

Apply set_priority_classes(std::map<std::string, Priority>& target) {
  return [&target](const std::string& v) -> std::optional<std::string> {
    auto parsed = parse_priority_classes(v);
    if (!parsed) return parsed.error();
    target = *parsed;
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

Apply set_resources(std::vector<ResourceKind>& target) {
  return [&target](const std::string& v) -> std::optional<std::string> {
    std::vector<ResourceKind> kinds;
    std::stringstream list(v);
    std::string item;
    while (std::getline(list, item, ',')) {
      auto kind = parse_resource_kind(item);
      if (!kind) return "unknown resource '" + item + "' (expected gpu, vram, cores)";
      kinds.push_back(*kind);
    }
    if (kinds.empty()) return "no resources given";
    target = std::move(kinds);
    return std::nullopt;
  };
}

Apply set_size(std::uint64_t& target) {
  return [&target](const std::string& v) -> std::optional<std::string> {
    auto size = config::parse_size(v, config::SizeDialect::Native);
    if (!size) return size.error();
    if (*size == 0) return "must be positive";
    target = *size;
    return std::nullopt;
  };
}

Apply set_vram_unit(std::uint64_t& target) {
  return [&target, size = set_size(target)](const std::string& v) -> std::optional<std::string> {
    if (v == "auto") {
      target = kAutoVramUnit;
      return std::nullopt;
    }
    return size(v);
  };
}

Apply set_node_selector(std::vector<std::pair<std::string, std::string>>& target) {
  return [&target](const std::string& v) -> std::optional<std::string> {
    std::vector<std::pair<std::string, std::string>> pairs;
    std::size_t start = 0;
    while (start < v.size()) {
      std::size_t end = v.find(',', start);
      if (end == std::string::npos) end = v.size();
      const std::string item = v.substr(start, end - start);
      const std::size_t eq = item.find('=');
      if (eq == std::string::npos || eq == 0) return "expected KEY=VALUE[,KEY=VALUE...], got '" + item + "'";
      pairs.emplace_back(item.substr(0, eq), item.substr(eq + 1));
      start = end + 1;
    }
    target = std::move(pairs);
    return std::nullopt;
  };
}

Apply set_placement(Placement& target) {
  return [&target](const std::string& v) -> std::optional<std::string> {
    if (v == "binpack") {
      target = Placement::Binpack;
    } else if (v == "spread") {
      target = Placement::Spread;
    } else {
      return "expected binpack or spread";
    }
    return std::nullopt;
  };
}

Apply set_device_list_strategy(bool& cdi) {
  return [&cdi](const std::string& v) -> std::optional<std::string> {
    if (v != "envvar" && v != "cdi") return "expected envvar or cdi";
    cdi = v == "cdi";
    return std::nullopt;
  };
}

// vendor.com/class, as the CDI specification writes a kind.
Apply set_cdi_kind(std::string& target) {
  return [&target](const std::string& v) -> std::optional<std::string> {
    const std::size_t slash = v.find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == v.size() ||
        v.find('/', slash + 1) != std::string::npos ||
        v.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/") !=
            std::string::npos) {
      return "expected a CDI kind like nvidia.com/gpu";
    }
    target = v;
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

const char* const kLogLevels = "error, warn, info, debug, trace";

// The connection limits of a BoundedServer: the daemon's API and the webhook take the same flags
// under their own names.
struct LimitFlagNames {
  const char* threads;
  const char* per_client;
  const char* request_timeout;
};

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

// --mps and its settings, the same for serve and dra.
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

std::vector<Flag> serve_flags(ServeOptions& out) {
  return joined({
      {{"root", "DIR", "GPUSLICE_NODE_ROOT", kDefaultRoot, "host directory of per-container state",
        set_text(out.root)},
       {"listen", "HOST:PORT", "GPUSLICE_NODE_LISTEN", config::kDefaultNodeListen, "/metrics and API address",
        set_listen(out.api.host, out.api.port)},
       {"token-file", "FILE", "GPUSLICE_NODE_TOKEN_FILE", nullptr,
        "file holding the API's bearer token, read again when it changes (else the token itself "
        "from GPUSLICE_NODE_TOKEN; with neither, the API answers 401)",
        set_text(out.api.token_file)},
       {"metrics-auth", nullptr, nullptr, nullptr, "require the token on /metrics too",
        set_switch(out.api.metrics_require_token, true)}},
      limit_flags(out.api.limits, {"http-threads", "http-connections-per-client", "http-request-timeout"},
                  "128"),
      {{"nvml-library", "PATH", "GPUSLICE_NVML_LIBRARY", "libnvidia-ml.so.1", "NVML to dlopen",
        set_text(out.nvml_library)},
       {"fake-gpus", "NxSIZE", nullptr, nullptr,
        "no NVML: N identical GPUs of SIZE memory, e.g. 2x16Gi (demos)", set_text(out.fake_gpus)},
       {"allow-no-gpu", nullptr, nullptr, nullptr, "keep serving /metrics when NVML cannot be loaded",
        set_switch(out.allow_no_gpu, true)},
       {"scan-interval", "DURATION", nullptr, "1s", "how often state and GPUs are read",
        set_duration(out.scan_interval)},
       {"no-device-plugin", nullptr, nullptr, nullptr, "do not serve the kubelet device plugin",
        set_switch(out.device_plugin, false)},
       {"device-plugin-dir", "DIR", nullptr, kKubeletDevicePluginDir, "kubelet device plugin directory",
        set_text(out.plugin.device_plugin_dir)},
       {"resources", "LIST", nullptr, "gpu,vram,cores", "resources to advertise, of gpu,vram,cores",
        set_resources(out.plugin.resources)},
       {"resource-domain", "NAME", nullptr, "gpuslice.io", "resource name prefix",
        set_text(out.plugin.resource_domain)},
       {"replicas", "N", nullptr, "4", "gpuslice.io/gpu slots per GPU",
        set_number(out.plugin.catalog.replicas, 1, 9999)},
       {"vram-unit", "SIZE|auto", nullptr, "auto",
        "memory per gpuslice.io/vram device; auto: the smallest power-of-two MiB whose device list fits "
        "the kubelet's message limit (1Mi up to about 150 GiB of VRAM per node)",
        set_vram_unit(out.plugin.catalog.vram_unit)},
       {"placement", "binpack|spread", nullptr, "binpack", "how GetPreferredAllocation picks GPUs",
        set_placement(out.plugin.catalog.placement)},
       {"dev-root", "DIR", nullptr, "/dev", "where /dev/nvidia* are found on the host",
        set_text(out.plugin.catalog.dev_root)},
       {"host-jobs", nullptr, nullptr, nullptr,
        "make ROOT/jobs (mode 1777) and report the jobs there: `gpuslice run --shared-dir ROOT/jobs/NAME`",
        set_switch(out.host_jobs, true)},
       {"kubelet-pods-dir", "DIR", nullptr, kKubeletPodsDir,
        "kubelet pods directory, for webhook-injected pods (empty to disable)",
        set_text(out.kubelet_pods_dir)},
       {"device-list-strategy", "envvar|cdi", nullptr, "envvar",
        "how GPUs reach a container: NVIDIA_VISIBLE_DEVICES and device nodes (NVIDIA runtime), or CDI "
        "device names <cdi-kind>=<GPU UUID> (CDI-enabled runtimes)",
        set_device_list_strategy(out.plugin.catalog.cdi)},
       {"cdi-kind", "KIND", nullptr, "nvidia.com/gpu", "CDI kind of the GPUs",
        set_cdi_kind(out.plugin.catalog.cdi_kind)},
       {"node-name", "NAME", "NODE_NAME", nullptr,
        "node label of metrics and API answers (default the host name)", set_text(out.node_name)}},
      mps_flags(out.mps),
      {{"podresources-socket", "PATH", nullptr, kDefaultPodResourcesSocket,
        "kubelet PodResources API, to label containers with their pod (empty to disable)",
        set_text(out.podresources_socket)},
       {"gc-grace-period", "DURATION", nullptr, "5m",
        "remove a container directory once the kubelet has not listed its allocation for this long and no "
        "process uses it (0: never)",
        set_duration_or_zero(out.gc_grace_period)},
       // The webhook's priority policy, applied again to the pods the kubelet lists (give both the
       // same values): the level written into each container's node-channel assignment.
       {"priority-high-namespaces", "NS[,NS...]", "GPUSLICE_WEBHOOK_PRIORITY_HIGH_NAMESPACES", "",
        "namespaces whose pods' containers are assigned priority high (as the webhook's flag; empty: none)",
        set_namespace_list(out.priority.high_namespaces)},
       {"priority-classes", "CLASS=LEVEL[,...]", "GPUSLICE_WEBHOOK_PRIORITY_CLASSES", "",
        "PriorityClass names and their level, as the webhook's flag: pods of a class mapped to high are "
        "assigned high (the daemon reads the pod's class from the API server)",
        set_priority_classes(out.priority.priority_classes)},
       {"log-level", "LEVEL", "GPUSLICE_LOG_LEVEL", "info", kLogLevels, set_log_level(out.log_level)}},
  });
}

std::vector<Flag> webhook_flags(WebhookModeOptions& out) {
  return joined({
      {{"listen", "HOST:PORT", "GPUSLICE_WEBHOOK_LISTEN", "0.0.0.0:8443", "HTTPS address",
        set_listen(out.server.host, out.server.port)},
       {"tls-cert", "FILE", "GPUSLICE_WEBHOOK_TLS_CERT", "/etc/gpuslice/tls/tls.crt", "PEM certificate chain",
        set_text(out.server.tls_cert_file)},
       {"tls-key", "FILE", "GPUSLICE_WEBHOOK_TLS_KEY", "/etc/gpuslice/tls/tls.key", "PEM private key",
        set_text(out.server.tls_key_file)},
       {"root", "DIR", "GPUSLICE_NODE_ROOT", kDefaultRoot,
        "gpuslice root on the nodes; the library is DIR/lib", set_text(out.webhook.host_root)},
       {"resource-domain", "NAME", nullptr, "gpuslice.io", "device plugin resource prefix",
        set_text(out.webhook.resource_domain)},
       {"priority-high-namespaces", "NS[,NS...]", "GPUSLICE_WEBHOOK_PRIORITY_HIGH_NAMESPACES", "",
        "namespaces whose pods may run at gpuslice.io/priority: high (empty: none)",
        set_namespace_list(out.webhook.priority.high_namespaces)},
       {"priority-classes", "CLASS=LEVEL[,...]", "GPUSLICE_WEBHOOK_PRIORITY_CLASSES", "",
        "PriorityClass names and the gpuslice level their pods get (high allowed for them)",
        set_priority_classes(out.webhook.priority.priority_classes)},
       {"node-selector", "KEY=VALUE,...", nullptr, nullptr,
        "labels of the nodes gpuslice-node runs on, added to ai.compute/vram pods' nodeSelector",
        set_node_selector(out.webhook.node_selector)}},
      limit_flags(out.server.limits, {"threads", "connections-per-client", "request-timeout"}, "64"),
      {{"log-level", "LEVEL", "GPUSLICE_LOG_LEVEL", "info", kLogLevels, set_log_level(out.log_level)}},
  });
}

std::vector<Flag> dra_flags(DraModeOptions& out) {
  return joined({
      {{"root", "DIR", "GPUSLICE_NODE_ROOT", kDefaultRoot, "host directory of per-claim state",
        set_text(out.root)},
       {"listen", "HOST:PORT", "GPUSLICE_NODE_LISTEN", config::kDefaultNodeListen, "/metrics and API address",
        set_listen(out.api.host, out.api.port)},
       {"token-file", "FILE", "GPUSLICE_NODE_TOKEN_FILE", nullptr, "file holding the API's bearer token",
        set_text(out.api.token_file)},
       {"nvml-library", "PATH", "GPUSLICE_NVML_LIBRARY", "libnvidia-ml.so.1", "NVML to dlopen",
        set_text(out.nvml_library)},
       {"fake-gpus", "NxSIZE", nullptr, nullptr, "no NVML: N identical GPUs of SIZE memory (demos, tests)",
        set_text(out.fake_gpus)},
       {"scan-interval", "DURATION", nullptr, "1s", "how often GPUs and state are read",
        set_duration(out.scan_interval)},
       {"node-name", "NAME", "NODE_NAME", nullptr,
        "this node's name: the ResourceSlice's node and pool (required)", set_text(out.node_name)}},
      mps_flags(out.mps),
      {{"driver-name", "NAME", nullptr, "gpuslice.io", "DRA driver name (DeviceClass selectors name it)",
        set_text(out.driver)},
       {"plugins-dir", "DIR", nullptr, "/var/lib/kubelet/plugins",
        "where the DRA socket is served (<dir>/<driver>/dra.sock)", set_text(out.plugins_dir)},
       {"registry-dir", "DIR", nullptr, "/var/lib/kubelet/plugins_registry",
        "the kubelet's plugin registration directory", set_text(out.registry_dir)},
       {"cdi-dir", "DIR", nullptr, "/var/run/cdi", "where CDI specs of prepared claims are written",
        set_text(out.cdi_dir)},
       {"dev-root", "DIR", nullptr, "/dev", "where /dev/nvidia* are found on the host",
        set_text(out.dev_root)},
       {"api-server", "URL", nullptr, nullptr,
        "Kubernetes API server (default: in-cluster, KUBERNETES_SERVICE_HOST)", set_text(out.api_server)},
       {"api-token-file", "FILE", nullptr, "/var/run/secrets/kubernetes.io/serviceaccount/token",
        "service-account token for the API server (read again for every request)",
        set_text(out.api_token_file)},
       {"api-ca-file", "FILE", nullptr, "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
        "CA bundle the API server's certificate is checked against", set_text(out.api_ca_file)},
       {"api-timeout", "DURATION", nullptr, "10s", "deadline of one API request",
        set_duration(out.api_timeout)},
       {"no-publish", nullptr, nullptr, nullptr, "do not publish the ResourceSlices (another process does)",
        set_switch(out.publish, false)},
       {"no-partitionable-devices", nullptr, nullptr, nullptr,
        "publish only the shared gpu-N devices: no whole-GPU gpu-N-whole devices, no counters (where the "
        "scheduler lacks DRAPartitionableDevices; an API server that drops the fields is noticed anyway)",
        set_switch(out.partitionable, false)},
       {"dropped-capacity", "POLICY", "GPUSLICE_DRA_DROPPED_CAPACITY", "refuse",
        "a claim given a GPU without consumed capacity (the API server dropped its capacity request: "
        "DRAConsumableCapacity off) is refused, prepared with the whole GPU (whole), or with this memory "
        "limit (a size, e.g. 4Gi); a claim's own memory.limit applies in every case",
        [&out](const std::string& v) -> std::optional<std::string> {
          if (auto p = dra::parse_dropped_capacity(v); !p) return p.error();
          out.dropped_capacity = v;
          return std::nullopt;
        }},
       {"priority-high-namespaces", "NS[,NS...]", "GPUSLICE_DRA_PRIORITY_HIGH_NAMESPACES", "",
        "namespaces whose claims may ask for priority high (empty: none; elsewhere such a claim is "
        "refused at prepare)",
        set_namespace_list(out.priority_high_namespaces)},
       {"lease-namespace", "NAMESPACE", "POD_NAMESPACE", "gpuslice-system",
        "namespace of the Lease that keeps two daemons of one node from both publishing",
        set_text(out.lease_namespace)},
       {"lease-duration", "DURATION", nullptr, "15s",
        "how long the Lease holds without renewal (another daemon of the node waits this long)",
        set_duration(out.lease_duration)},
       {"identity", "NAME", "POD_NAME", nullptr, "holder identity in the Lease (default host name and pid)",
        set_text(out.identity)},
       {"log-level", "LEVEL", "GPUSLICE_LOG_LEVEL", "info", kLogLevels, set_log_level(out.log_level)}},
  });
}

const char* const kDraHead = "usage: gpuslice-node dra [flags]\n";
const char* const kServeHead = "usage: gpuslice-node serve [flags]\n";
const char* const kWebhookHead = "usage: gpuslice-node webhook [flags]   (or: gpuslice-webhook [flags])\n";

}  // namespace

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

std::string usage_main() {
  return "gpuslice-node: the gpuslice node daemon\n"
         "\n"
         "usage: gpuslice-node <command> [flags]\n"
         "\n"
         "commands:\n"
         "  serve     GPU discovery, /metrics, HTTP API and kubelet device plugin (DaemonSet)\n"
         "  dra       DRA kubelet plugin and ResourceSlice publisher (Kubernetes 1.32+, DaemonSet)\n"
         "  webhook   mutating admission webhook over TLS (also run as 'gpuslice-webhook')\n"
         "  version   print the version\n"
         "\n"
         "Run 'gpuslice-node <command> --help' for the flags of a command.\n";
}

std::string usage_serve() {
  ServeOptions scratch;
  return usage_of(kServeHead, serve_flags(scratch));
}

std::string usage_dra() {
  DraModeOptions scratch;
  return usage_of(kDraHead, dra_flags(scratch));
}

ParseOutcome parse_dra_options(const std::vector<std::string>& args,
                               const std::function<const char*(const char*)>& env, DraModeOptions& out) {
  const auto flags = dra_flags(out);
  ParseOutcome outcome = run_flags(args, env, flags, usage_of(kDraHead, flags));
  if (outcome.help || !outcome.message.empty()) return outcome;
  if (out.node_name.empty()) return {false, "--node-name (or NODE_NAME) is required"};
  if (const char* token = env("GPUSLICE_NODE_TOKEN")) out.api.token = token;
  return {};
}

std::string usage_webhook() {
  WebhookModeOptions scratch;
  return usage_of(kWebhookHead, webhook_flags(scratch));
}

ParseOutcome parse_serve_options(const std::vector<std::string>& args,
                                 const std::function<const char*(const char*)>& env, ServeOptions& out) {
  const auto flags = serve_flags(out);
  ParseOutcome outcome = run_flags(args, env, flags, usage_of(kServeHead, flags));
  if (outcome.help || !outcome.message.empty()) return outcome;
  // The token itself never comes from a flag: command lines are readable by every local user.
  if (const char* token = env("GPUSLICE_NODE_TOKEN")) out.api.token = token;
  return {};
}

ParseOutcome parse_webhook_options(const std::vector<std::string>& args,
                                   const std::function<const char*(const char*)>& env,
                                   WebhookModeOptions& out) {
  const auto flags = webhook_flags(out);
  return run_flags(args, env, flags, usage_of(kWebhookHead, flags));
}

}  // namespace gpuslice::node
