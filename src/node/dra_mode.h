// `gpuslice-node dra`: GPU discovery, the DRA kubelet plugin, the ResourceSlice publisher, and the
// daemon's /metrics and API over the claims' state (node/dra/).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "node/api/http_api.h"
#include "node/startup/flag_table.h"

namespace gpuslice::node {

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

// `args` excludes the program name and the mode. `env` looks up environment variables.
ParseOutcome parse_dra_options(const std::vector<std::string>& args, const EnvLookup& env,
                               DraModeOptions& out);
std::string usage_dra();

namespace dra {
// Runs until SIGTERM or SIGINT; returns the process's exit code.
int run_dra_mode(const std::vector<std::string>& args, const EnvLookup& env);
}  // namespace dra

}  // namespace gpuslice::node
