// `gpuslice-node webhook` (or gpuslice-webhook): the mutating admission webhook over TLS.
#pragma once

#include <string>
#include <vector>

#include "node/admission/webhook.h"
#include "node/admission/webhook_server.h"
#include "node/startup/flag_table.h"

namespace gpuslice::node {

struct WebhookModeOptions {
  WebhookServerOptions server;
  WebhookOptions webhook;
  std::string log_level;
};

// `args` excludes the program name and the mode. `env` looks up environment variables.
ParseOutcome parse_webhook_options(const std::vector<std::string>& args, const EnvLookup& env,
                                   WebhookModeOptions& out);
std::string usage_webhook();

// Runs until SIGTERM or SIGINT; returns the process's exit code.
int run_webhook_mode(const std::vector<std::string>& args, const EnvLookup& env);

}  // namespace gpuslice::node
