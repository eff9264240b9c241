#include "node/api/http_api.h"

#include <httplib.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <iterator>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/log.h"
#include "config/text_util.h"
#include "node/api/api_body.h"
#include "node/api/api_token.h"
#include "node/api/limits_api.h"
#include "node/api/metrics.h"
#include "node/dra/publisher_status.h"
#include "node/http/untrusted_json.h"
#include "node/mps/mps_report_json.h"
#include "status/status_json.h"

namespace gpuslice::node {
namespace {

using nlohmann::json;

void send_error(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  res.set_content(json_text(json{{"error", message}, {"status", status}}), "application/json");
}

json limits_json(const Limits& limits) {
  json out = json::object();
  out["memory"] = limits.memory ? json(*limits.memory) : json(nullptr);
  out["compute"] = limits.compute ? json(*limits.compute) : json(nullptr);
  return out;
}

json owner_value(const std::string& value) { return value.empty() ? json(nullptr) : json(value); }

std::optional<std::string> known(const std::string& value) {
  return value.empty() ? std::nullopt : std::optional<std::string>(value);
}

// The container objects have the one status shape shared with `gpuslice status --json` (docs/api.md),
// plus what only the node knows: its name and the container's collection state.
json container_json(const ContainerView& c, const std::string& node) {
  status::ContainerStatus out;
  out.id = c.id;
  out.pod_namespace = known(c.owner.namespace_name);
  out.pod_name = known(c.owner.pod);
  out.container_name = known(c.owner.container);
  out.has_state = c.has_state;
  if (!c.error.empty()) out.error = c.error;
  out.memory_limit = c.limits.memory;
  out.compute_limit = c.limits.compute;
  if (c.priority) out.priority = priority_name(*c.priority);
  out.held_back_ns = c.held_back_ns;
  out.node_channel_refused = c.node_channel_refused;
  if (c.assigned_priority) out.assigned_priority = priority_name(*c.assigned_priority);
  out.assignment_refused = c.assignment_refused;
  for (const auto& d : c.devices) {
    status::DeviceStatus dev;
    dev.record = d.record;
    dev.uuid = d.uuid;
    dev.gpu = d.gpu;
    dev.cuda_index = d.cuda_index;
    dev.total_bytes = d.total_bytes;
    dev.quota_bytes = d.quota_bytes;
    dev.requested_quota_bytes = d.requested_quota_bytes;
    dev.quota_cap_bytes = d.quota_cap_bytes;
    dev.guarantee_bytes = d.guarantee_bytes;
    dev.used_bytes = d.used_bytes;
    dev.borrowed_bytes = d.borrowed_bytes;
    dev.on_host_bytes = d.on_host_bytes;
    dev.reclaim_episodes = d.reclaim_episodes;
    dev.reclaim_ns = d.reclaim_ns;
    dev.reclaim_bytes = d.reclaim_bytes;
    if (d.compute_limit != 0) dev.compute_limit_percent = d.compute_limit;
    dev.refused_allocations = d.refused_allocations;
    dev.busy_ns = d.busy_ns;
    dev.compute_utilization_ratio = d.utilization_ratio;
    out.devices.push_back(std::move(dev));
  }
  for (const auto& p : c.processes) {
    status::ProcessStatus proc;
    proc.pid = p.pid;
    if (p.host_pid > 0) proc.host_pid = p.host_pid;
    proc.command = p.command;
    for (std::size_t i = 0; i < p.used_bytes.size(); ++i) {
      status::ProcessDeviceStatus pd;
      if (i < c.devices.size()) pd.record = c.devices[i].record;
      pd.used_bytes = p.used_bytes[i];
      // The same figures `gpuslice status` reads from the state file, so the two views agree.
      if (i < p.busy_ns.size()) {
        pd.busy_ns = p.busy_ns[i];
        if (i < c.devices.size() && c.devices[i].busy_ns > 0) {
          pd.compute_share = static_cast<double>(p.busy_ns[i]) / static_cast<double>(c.devices[i].busy_ns);
        }
      }
      proc.devices.push_back(pd);
    }
    out.processes.push_back(std::move(proc));
  }
  json doc = status::to_json(out);
  doc["node"] = owner_value(node);
  doc["state"] = container_state_name(c.state);
  return doc;
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
  for (const auto& c : view.containers) containers.push_back(container_json(c, view.node));
  json plugins = json::array();
  for (const auto& p : view.plugins) {
    plugins.push_back({{"resource", p.resource},
                       {"state", registration_state_name(p.state)},
                       {"registrations", p.registrations}});
  }
  const char* podresources = view.podresources == AttributionState::Off  ? "off"
                             : view.podresources == AttributionState::Up ? "up"
                                                                         : "down";
  json doc = {{"version", std::string(version)},
              {"node", owner_value(view.node)},
              {"taken_at_ns", view.taken_at_ns},
              {"device_plugin", view.device_plugin ? json(std::move(plugins)) : json(nullptr)},
              {"podresources",
               {{"state", podresources},
                {"error", view.podresources_error.empty() ? json(nullptr) : json(view.podresources_error)}}},
              {"containers_removed", view.containers_removed},
              {"nvml_error", view.gpu_error.empty() ? json(nullptr) : json(view.gpu_error)},
              {"gpus", std::move(gpus)},
              {"containers", std::move(containers)}};
  if (view.mps) doc["mps"] = mps::report_json(*view.mps);
  if (view.dra) doc["dra"] = dra::publisher_status_json(*view.dra);
  // Command lines and error texts come from files tenants write: never let their bytes throw.
  return json_text(doc);
}

struct ApiServer::Impl {
  ApiOptions options;
  HostLayout layout;
  Collector& collector;
  LedgerOpener opener;
  ApiToken token;
  BoundedServer server;

  // /metrics is rendered once per collector refresh, not once per scrape.
  std::mutex metrics_mutex;
  std::shared_ptr<const NodeView> metrics_view;
  std::string metrics_text;

  Impl(ApiOptions o, HostLayout l, Collector& c, LedgerOpener op)
      : options(std::move(o)),
        layout(std::move(l)),
        collector(c),
        opener(std::move(op)),
        token(options.token, options.token_file),
        server(options.limits) {}

  bool authorized(const httplib::Request& req, httplib::Response& res) {
    const std::string expected = token.current();
    if (expected.empty()) {
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
    if (!constant_time_equals(std::string_view(header).substr(prefix.size()), expected)) {
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
    if (auto err = read_limits_body(req.body, update)) return send_error(res, err->status, err->message);
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
    res.set_content(json_text(body), "application/json");
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
        if (c.id == id) return res.set_content(json_text(container_json(c, view->node)), "application/json");
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
                 res.status == 404 ? "no route for " + req.method + " " + req.path
                 : res.status == 413
                     ? "request body is larger than " + std::to_string(kMaxApiBodyBytes) + " bytes"
                     : "request failed");
    });
    server.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, const std::exception_ptr& ep) {
          std::string what = "internal error";
          try {
            if (ep) std::rethrow_exception(ep);
          } catch (const std::exception& e) {
            what = e.what();
          } catch (...) {
          }
          GS_LOG(Error, "HTTP handler failed: %s", config::detail::printable(what, 256).c_str());
          send_error(res, 500, what);
        });
  }
};

ApiServer::ApiServer(ApiOptions options, HostLayout layout, Collector& collector, LedgerOpener opener)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(layout), collector, std::move(opener))) {
  impl_->routes();
}

ApiServer::~ApiServer() { stop(); }

Result<int> ApiServer::start() {
  auto port = impl_->server.bind_port(impl_->options.host, impl_->options.port);
  if (!port) return port;
  impl_->server.start_serving();
  GS_LOG(Info, "HTTP API and /metrics on %s:%d", impl_->options.host.c_str(), *port);
  if (!impl_->options.token_file.empty()) impl_->token.current();  // says now whether a token is there
  return port;
}

void ApiServer::stop() {
  if (impl_) impl_->server.stop_serving();
}

}  // namespace gpuslice::node
