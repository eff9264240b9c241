#include "node/http_api.h"

#include <httplib.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/log.h"
#include "node/limits_api.h"
#include "node/metrics.h"

namespace gpuslice::node {
namespace {

using nlohmann::json;

void send_error(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  res.set_content(json{{"error", message}, {"status", status}}.dump(), "application/json");
}

json limits_json(const Limits& limits) {
  json out = json::object();
  out["memory"] = limits.memory ? json(*limits.memory) : json(nullptr);
  out["compute"] = limits.compute ? json(*limits.compute) : json(nullptr);
  return out;
}

json container_json(const ContainerView& c) {
  json devices = json::array();
  for (const auto& d : c.devices) {
    devices.push_back({
        {"uuid", d.uuid},
        {"gpu", d.gpu ? json(*d.gpu) : json(nullptr)},
        {"cuda_index", d.cuda_index},
        {"memory_total_bytes", d.total_bytes},
        {"memory_quota_bytes", d.quota_bytes ? json(*d.quota_bytes) : json(nullptr)},
        {"memory_used_bytes", d.used_bytes},
        {"compute_limit_percent", d.compute_limit},
        {"compute_utilization_ratio", d.utilization_ratio ? json(*d.utilization_ratio) : json(nullptr)},
        {"refused_allocations", d.refused_allocations},
    });
  }
  json processes = json::array();
  for (const auto& p : c.processes) {
    processes.push_back(
        {{"pid", p.pid}, {"host_pid", p.host_pid}, {"command", p.command}, {"used_bytes", p.used_bytes}});
  }
  return {{"id", c.id},
          {"has_state", c.has_state},
          {"error", c.error.empty() ? json(nullptr) : json(c.error)},
          {"limits", limits_json(c.limits)},
          {"devices", std::move(devices)},
          {"processes", std::move(processes)}};
}

}  // namespace

bool constant_time_equals(std::string_view a, std::string_view b) {
  // Digests first: equal lengths for CRYPTO_memcmp, and the token's length does not leak either.
  unsigned char da[SHA256_DIGEST_LENGTH];
  unsigned char db[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(a.data()), a.size(), da);
  SHA256(reinterpret_cast<const unsigned char*>(b.data()), b.size(), db);
  return CRYPTO_memcmp(da, db, sizeof da) == 0;
}

std::string status_json(const NodeView& view, std::string_view version) {
  json gpus = json::array();
  for (const auto& g : view.gpus) {
    gpus.push_back(
        {{"index", g.index},
         {"uuid", g.uuid},
         {"name", g.name},
         {"memory_total_bytes", g.memory_total_bytes},
         {"memory_used_bytes", g.memory_used_bytes},
         {"utilization_percent", g.utilization_percent ? json(*g.utilization_percent) : json(nullptr)},
         {"healthy", g.healthy},
         {"health_error", g.health_error.empty() ? json(nullptr) : json(g.health_error)}});
  }
  json containers = json::array();
  for (const auto& c : view.containers) containers.push_back(container_json(c));
  json doc = {{"version", std::string(version)},
              {"taken_at_ns", view.taken_at_ns},
              {"nvml_error", view.gpu_error.empty() ? json(nullptr) : json(view.gpu_error)},
              {"gpus", std::move(gpus)},
              {"containers", std::move(containers)}};
  return doc.dump();
}

struct ApiServer::Impl {
  ApiOptions options;
  HostLayout layout;
  Collector& collector;
  LedgerOpener opener;
  httplib::Server server;
  std::thread thread;
  std::atomic<bool> listen_returned{false};

  // /metrics is rendered once per collector refresh, not once per scrape.
  std::mutex metrics_mutex;
  std::shared_ptr<const NodeView> metrics_view;
  std::string metrics_text;

  Impl(ApiOptions o, HostLayout l, Collector& c, LedgerOpener op)
      : options(std::move(o)), layout(std::move(l)), collector(c), opener(std::move(op)) {}

  bool authorized(const httplib::Request& req, httplib::Response& res) const {
    if (options.token.empty()) {
      send_error(res, 401, "the API is disabled: no token configured (--token-file or GPUSLICE_NODE_TOKEN)");
      return false;
    }
    const std::string header = req.get_header_value("Authorization");
    const std::string_view prefix = "Bearer ";
    if (header.size() <= prefix.size() || header.compare(0, prefix.size(), prefix) != 0) {
      res.set_header("WWW-Authenticate", "Bearer");
      send_error(res, 401, "missing bearer token (Authorization: Bearer <token>)");
      return false;
    }
    if (!constant_time_equals(std::string_view(header).substr(prefix.size()), options.token)) {
      res.set_header("WWW-Authenticate", "Bearer error=\"invalid_token\"");
      send_error(res, 401, "invalid bearer token");
      return false;
    }
    return true;
  }

  std::string metrics() {
    auto view = collector.view();
    std::lock_guard lock(metrics_mutex);
    if (view != metrics_view) {
      metrics_text = render_metrics(*view, options.version);
      metrics_view = std::move(view);
    }
    return metrics_text;
  }

  void set_limits(const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    const std::string id = req.matches[1];
    if (!valid_container_id(id)) return send_error(res, 400, "invalid container id '" + id + "'");
    LimitsUpdate update;
    if (auto err = parse_limits_request(req.body, update)) return send_error(res, err->status, err->message);
    LimitsApplied applied;
    if (auto err = apply_limits(layout, id, update, opener, applied)) {
      return send_error(res, err->status, err->message);
    }
    GS_LOG(Info, "limits of container %s set: memory=%s compute=%s (%d live device(s))", id.c_str(),
           applied.limits.memory ? applied.limits.memory->c_str() : "-",
           applied.limits.compute ? applied.limits.compute->c_str() : "-", applied.devices_updated);
    json body = {{"id", id},
                 {"limits", limits_json(applied.limits)},
                 {"live_devices_updated", applied.devices_updated},
                 {"ledger_error", applied.ledger_error.empty() ? json(nullptr) : json(applied.ledger_error)}};
    res.set_content(body.dump(), "application/json");
  }

  void routes() {
    server.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("ok\n", "text/plain");
    });
    server.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
      if (options.metrics_require_token && !authorized(req, res)) return;
      res.set_content(metrics(), kMetricsContentType);
    });
    server.Get("/api/v1/status", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req, res)) return;
      res.set_content(status_json(*collector.view(), options.version), "application/json");
    });
    server.Get(R"(/api/v1/containers/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req, res)) return;
      const std::string id = req.matches[1];
      auto view = collector.view();
      for (const auto& c : view->containers) {
        if (c.id == id) return res.set_content(container_json(c).dump(), "application/json");
      }
      send_error(res, 404, "no container '" + id + "' on this node");
    });
    auto limits = [this](const httplib::Request& req, httplib::Response& res) { set_limits(req, res); };
    server.Put(R"(/api/v1/containers/([^/]+)/limits)", limits);
    server.Post(R"(/api/v1/containers/([^/]+)/limits)", limits);
    server.Get(R"(/api/v1/containers/([^/]+)/limits)", [](const httplib::Request&, httplib::Response& res) {
      res.set_header("Allow", "PUT, POST");
      send_error(res, 405, "use PUT or POST to set limits; GET /api/v1/containers/<id> reads them");
    });
    // Anything unrouted gets a JSON body too (handlers that set their own body are left alone).
    server.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      send_error(res, res.status,
                 res.status == 404 ? "no route for " + req.method + " " + req.path : "request failed");
    });
    server.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "internal error";
      try {
        if (ep) std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      GS_LOG(Error, "HTTP handler failed: %s", what.c_str());
      send_error(res, 500, what);
    });
    server.set_payload_max_length(64 * 1024);
    server.set_keep_alive_max_count(1000);
    // Small responses on kept-alive connections: without this, Nagle and delayed ACKs cost ~40 ms each.
    server.set_tcp_nodelay(true);
    unsigned threads = options.threads ? options.threads : 1;
    server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  }
};

ApiServer::ApiServer(ApiOptions options, HostLayout layout, Collector& collector, LedgerOpener opener)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(layout), collector, std::move(opener))) {
  impl_->routes();
}

ApiServer::~ApiServer() { stop(); }

Result<int> ApiServer::start() {
  int port = impl_->options.port;
  if (port == 0) {
    port = impl_->server.bind_to_any_port(impl_->options.host);
    if (port < 0) return make_error("cannot bind " + impl_->options.host + ":0");
  } else if (!impl_->server.bind_to_port(impl_->options.host, port)) {
    return make_error("cannot bind " + impl_->options.host + ":" + std::to_string(port) + ": " +
                      std::strerror(errno));
  }
  impl_->listen_returned = false;
  impl_->thread = std::thread([this] {
    impl_->server.listen_after_bind();
    impl_->listen_returned = true;
  });
  // stop() is a no-op until the accept loop runs, so do not hand back a server that cannot be stopped.
  while (!impl_->server.is_running() && !impl_->listen_returned) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  GS_LOG(Info, "HTTP API and /metrics on %s:%d", impl_->options.host.c_str(), port);
  return port;
}

void ApiServer::stop() {
  if (!impl_ || !impl_->thread.joinable()) return;
  impl_->server.stop();
  impl_->thread.join();
}

}  // namespace gpuslice::node
