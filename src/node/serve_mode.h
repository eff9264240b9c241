// `gpuslice-node serve` (the DaemonSet): GPU discovery, /metrics and the HTTP API, the kubelet device
// plugin, the node channel's assignments and, with --mps, the node's MPS control daemon.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "node/admission/webhook.h"
#include "node/api/http_api.h"
#include "node/kubelet/device_plugin.h"
#include "node/startup/flag_table.h"

namespace gpuslice::node {

// What parse_serve_options fills in. The defaults are the flag table's (serve_mode.cpp), applied by
// parsing; the members hold none of their own, so there is no second copy to drift from the table.
// (`device_plugin` is on unless --no-device-plugin: a switch has no default in the table.)
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
  std::string index_node_dir;                    // --index-node-dir: keep its writer index; empty: none
  std::string node_name;                         // --node-name / NODE_NAME; empty: the host name
  std::string podresources_socket;               // empty: no pod attribution
  std::chrono::milliseconds gc_grace_period{0};  // 0: never remove directories
  PriorityPolicy priority;                       // the webhook's, for node-channel assignments
  MpsOptions mps;
  std::string log_level;
};

// `args` excludes the program name and the mode. `env` looks up environment variables.
ParseOutcome parse_serve_options(const std::vector<std::string>& args, const EnvLookup& env,
                                 ServeOptions& out);
std::string usage_serve();

// Runs until SIGTERM or SIGINT; returns the process's exit code.
int run_serve_mode(const std::vector<std::string>& args, const EnvLookup& env);

}  // namespace gpuslice::node
