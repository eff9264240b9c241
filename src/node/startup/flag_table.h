// Command line and environment of gpuslice-node. Flags win over environment variables, which win
// over the defaults. Each flag is declared once (options.cpp): name, value, environment variable,
// default and help, from which parsing, validation and the usage text all come.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "node/admission/webhook_server.h"
#include "node/api/http_api.h"
#include "node/kubelet/device_plugin.h"
#include "node/kubelet/kubelet_paths.h"
#include "node/kubelet/podresources.h"

namespace gpuslice::node {

// What parse_serve_options fills in. The defaults are the flag table's (options.cpp), applied by
// parsing; the members hold none of their own, so there is no second copy to drift from the table.
// (`device_plugin` is on unless --no-device-plugin: a switch has no default in the table.)
// --mps: the node's MPS control daemon, run by this daemon (node/mps/manager.h), its pipe directory
// handed to every gpuslice container.
struct MpsOptions {
  bool enabled = false;
  std::string root;    // --mps-dir: pipe/ and log/ under it
  std::string binary;  // --mps-binary
};

struct ServeOptions {
  std::string root;
  ApiOptions api;  // api.token from GPUSLICE_NODE_TOKEN, api.token_file from --token-file
  std::string nvml_library;
  std::string fake_gpus;  // "2x16Gi": no NVML, fixed GPUs (demos, tests)
  bool allow_no_gpu = false;
  std::chrono::milliseconds scan_interval{0};
  bool device_plugin = true;
  PluginOptions plugin;
  std::string kubelet_pods_dir;                  // empty: webhook-injected pods are not looked for
  bool host_jobs = false;                        // --host-jobs: make and read <root>/jobs
  std::string node_name;                         // --node-name / NODE_NAME; empty: the host name
  std::string podresources_socket;               // empty: no pod attribution
  std::chrono::milliseconds gc_grace_period{0};  // 0: never remove directories
  PriorityPolicy priority;                       // the webhook's, for node-channel assignments
  MpsOptions mps;
  std::string log_level;
};

// `gpuslice-node dra`: the DRA kubelet plugin and this node's ResourceSlice publisher (node/dra/).
struct DraModeOptions {
  std::string root;
  ApiOptions api;  // /metrics and the API, as in serve
  std::string nvml_library;
  std::string fake_gpus;
  std::chrono::milliseconds scan_interval{0};
  std::string node_name;  // required: the pool and the slice are the node's
  std::string driver;
  std::string plugins_dir;
  std::string registry_dir;
  std::string cdi_dir;
  std::string dev_root;
  std::string api_server;  // empty: in-cluster (KUBERNETES_SERVICE_HOST)
  std::string api_token_file;
  std::string api_ca_file;
  std::chrono::milliseconds api_timeout{0};
  bool publish = true;
  bool partitionable = true;                // whole-GPU devices and counters beside the shared devices
  std::string dropped_capacity = "refuse";  // refuse | whole | <size> (dra::parse_dropped_capacity)
  MpsOptions mps;
  std::vector<std::string> priority_high_namespaces;  // whose claims may ask for priority high
  std::string lease_namespace;
  std::string identity;
  std::chrono::milliseconds lease_duration{0};
  std::string log_level;
};

struct WebhookModeOptions {
  WebhookServerOptions server;
  WebhookOptions webhook;
  std::string log_level;
};

// Either options to run with, or a message for the user (help text when `help` is set).
struct ParseOutcome {
  bool help = false;
  std::string message;
};

Result<std::chrono::milliseconds> parse_duration(std::string_view text);
// "HOST:PORT" or ":PORT" (all interfaces).
Result<bool> parse_listen(std::string_view text, std::string& host, int& port);

// `args` excludes the program name and the subcommand. `env` looks up environment variables.
ParseOutcome parse_serve_options(const std::vector<std::string>& args,
                                 const std::function<const char*(const char*)>& env, ServeOptions& out);
ParseOutcome parse_dra_options(const std::vector<std::string>& args,
                               const std::function<const char*(const char*)>& env, DraModeOptions& out);
ParseOutcome parse_webhook_options(const std::vector<std::string>& args,
                                   const std::function<const char*(const char*)>& env,
                                   WebhookModeOptions& out);

std::string usage_main();
std::string usage_serve();
std::string usage_webhook();
std::string usage_dra();

}  // namespace gpuslice::node
