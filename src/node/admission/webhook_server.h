// gpuslice-webhook's HTTPS server: POST /mutate (review_admission), GET /healthz, on a BoundedServer
// (connection caps, request deadlines, fast 413s).
#pragma once

#include <memory>
#include <string>

#include "common/result.h"
#include "node/admission/webhook.h"
#include "node/http/bounded_server.h"

namespace gpuslice::node {

inline ServerLimits default_webhook_limits() {
  ServerLimits limits;
  limits.max_connections = 64;
  limits.max_body_bytes = kMaxReviewBytes;
  return limits;
}

struct WebhookServerOptions {
  std::string host = "0.0.0.0";
  int port = 8443;  // 0 = any free port (tests)
  std::string tls_cert_file;
  std::string tls_key_file;
  ServerLimits limits = default_webhook_limits();
};

// HTTPS server: POST /mutate, GET /healthz. The certificate and key are read again when their files
// change (cert-manager renews them in place), checked at most every few seconds.
class WebhookServer {
 public:
  WebhookServer(WebhookServerOptions server, WebhookOptions options);
  ~WebhookServer();
  WebhookServer(const WebhookServer&) = delete;
  WebhookServer& operator=(const WebhookServer&) = delete;

  Result<int> start();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpuslice::node
