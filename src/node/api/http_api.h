// The daemon's HTTP endpoint: Prometheus /metrics, /healthz, and a small bearer-token API
//   GET  /api/v1/status                      every GPU and container (JSON)
//   GET  /api/v1/containers/<id>             one container
//   PUT  /api/v1/containers/<id>/limits      {"memory":"8Gi","compute":30}  (POST accepted too)
// Errors are JSON {"error": "...", "status": N} with 400/401/404/405/413/500/503.
// It runs on a BoundedServer: slow or numerous clients cannot starve /healthz, bodies are bounded.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "common/result.h"
#include "node/host/host_layout.h"
#include "node/http/bounded_server.h"
#include "node/node_view/collector.h"

namespace gpuslice::node {

struct ApiOptions {
  std::string host = "0.0.0.0";
  int port = 9410;  // 0 = any free port (tests)
  // Bearer token for /api/v1/*: token_file when set (read again whenever it changes), else token.
  // No token disables the API (every call answers 401).
  std::string token;
  std::string token_file;
  bool metrics_require_token = false;
  ServerLimits limits;
  std::string version = "dev";
};

// Compares without an early exit, so response time does not reveal how much of a guess was right.
bool constant_time_equals(std::string_view a, std::string_view b);

// The JSON document of GET /api/v1/status.
std::string status_json(const NodeView& view, std::string_view version);

class ApiServer {
 public:
  ApiServer(ApiOptions options, HostLayout layout, Collector& collector, LedgerOpener opener = {});
  ~ApiServer();
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Binds and starts serving on a background thread; returns the bound port.
  Result<int> start();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpuslice::node
