#include "node/webhook_mode.h"

#include "common/log.h"
#include "config/default_paths.h"
#include "node/host/host_layout.h"
#include "node/startup/run_mode.h"

namespace gpuslice::node {
namespace {

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
        set_priority_classes(out.webhook.priority)},
       {"node-selector", "KEY=VALUE,...", nullptr, nullptr,
        "labels of the nodes gpuslice-node runs on, added to ai.compute/vram pods' nodeSelector",
        set_node_selector(out.webhook.node_selector)}},
      limit_flags(out.server.limits, {"threads", "connections-per-client", "request-timeout"}, "64"),
      {log_level_flag(out.log_level)},
  });
}

const char* const kWebhookHead = "usage: gpuslice-node webhook [flags]   (or: gpuslice-webhook [flags])\n";

}  // namespace

ParseOutcome parse_webhook_options(const std::vector<std::string>& args, const EnvLookup& env,
                                   WebhookModeOptions& out) {
  return parse_mode_flags(args, env, webhook_flags(out), kWebhookHead);
}

std::string usage_webhook() { return mode_usage(kWebhookHead, webhook_flags); }

int run_webhook_mode(const std::vector<std::string>& args, const EnvLookup& env) {
  WebhookModeOptions options;
  if (auto code =
          begin_mode(parse_webhook_options(args, env, options), "gpuslice-webhook", options.log_level))
    return *code;
  WebhookServer server(options.server, options.webhook);
  if (auto port = server.start(); !port) {
    GS_LOG(Error, "%s", port.error().c_str());
    return 1;
  }
  while (!wait_for_stop(std::chrono::seconds(3600))) {
  }
  GS_LOG(Info, "stopping");
  server.stop();
  return 0;
}

}  // namespace gpuslice::node
