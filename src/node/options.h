// Command line and environment of gpuslice-node. Flags win over environment variables.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "node/device_plugin.h"
#include "node/http_api.h"
#include "node/webhook.h"

namespace gpuslice::node {

struct ServeOptions {
  std::string root = kDefaultRoot;
  ApiOptions api;
  std::string token_file;
  std::string nvml_library = "libnvidia-ml.so.1";
  std::string fake_gpus;  // "2x16Gi": no NVML, fixed GPUs (demos, tests)
  bool allow_no_gpu = false;
  std::chrono::milliseconds scan_interval{1000};
  bool device_plugin = true;
  PluginOptions plugin;
  std::string kubelet_pods_dir = "/var/lib/kubelet/pods";
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
ParseOutcome parse_webhook_options(const std::vector<std::string>& args,
                                   const std::function<const char*(const char*)>& env,
                                   WebhookModeOptions& out);

std::string usage_main();
std::string usage_serve();
std::string usage_webhook();

}  // namespace gpuslice::node
