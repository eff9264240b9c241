#include "node/dra/api_client.h"

#include <fcntl.h>
#include <httplib.h>
#include <unistd.h>

#include <condition_variable>
#include <ctime>
#include <mutex>
#include <random>
#include <thread>

#include "common/errno_text.h"
#include "common/log.h"
#include "common/safe_file.h"
#include "config/text_util.h"
#include "node/http/untrusted_json.h"

namespace gpuslice::node::dra {
namespace {

using nlohmann::json;

constexpr std::size_t kMaxTokenBytes = std::size_t{64} * 1024;

// Stops `client` when `deadline` passes: cpp-httplib's own timeouts restart with every byte, so a
// server that trickles its answer would otherwise hold a request forever. Once due, it stops the
// client again every 20 ms until the request returns: a stop() that comes before the request has
// its socket does nothing, and one stop only would leave that request to run its full course (a
// watch cancelled at the wrong moment kept a stopping daemon for seconds).
class Deadline {
 public:
  Deadline(httplib::Client& client, std::chrono::milliseconds timeout, const std::atomic<bool>& cancelled)
      : thread_([this, &client, timeout, &cancelled] {
          const auto end = std::chrono::steady_clock::now() + timeout;
          std::unique_lock lock(mutex_);
          while (!done_) {
            const auto now = std::chrono::steady_clock::now();
            if (now >= end || cancelled) {
              expired_ = expired_ || now >= end;
              client.stop();
              cv_.wait_for(lock, std::chrono::milliseconds(20), [this] { return done_; });
              continue;
            }
            cv_.wait_for(
                lock, std::min<std::chrono::steady_clock::duration>(end - now, std::chrono::milliseconds(20)),
                [this] { return done_; });
          }
        }) {}
  ~Deadline() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  bool expired() {
    std::lock_guard lock(mutex_);
    return expired_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false, expired_ = false;
  std::thread thread_;
};

bool transient(int status) { return status == 429 || status >= 500; }

std::string rfc3339_now() { return rfc3339(std::chrono::system_clock::now()); }

}  // namespace

std::string rfc3339(std::chrono::system_clock::time_point t) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  ::gmtime_r(&seconds, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

std::string api_message(std::string_view text, std::size_t max_chars) {
  if (text.size() <= max_chars) return config::detail::printable(text, max_chars);
  std::size_t cut = max_chars;
  // Back to the last space or comma, unless that drops more than an eighth of the text.
  for (std::size_t i = max_chars; i > max_chars - max_chars / 8; --i) {
    if (text[i] == ' ' || text[i] == ',') {
      cut = i;
      break;
    }
  }
  return config::detail::printable(text.substr(0, cut), cut) + "...";
}

std::string api_status_error(const std::string& what, const ApiResponse& r) {
  std::string message;
  if (r.body.is_object() && r.body.contains("message") && r.body["message"].is_string())
    message = ": " + api_message(r.body["message"].get<std::string>());
  return what + ": HTTP " + std::to_string(r.status) + message;
}

ApiServerOptions in_cluster_options(const std::function<const char*(const char*)>& env) {
  ApiServerOptions o;
  const char* host = env("KUBERNETES_SERVICE_HOST");
  const char* port = env("KUBERNETES_SERVICE_PORT");
  if (host && *host) {
    std::string h = host;
    if (h.find(':') != std::string::npos) h = "[" + h + "]";  // IPv6
    o.url = "https://" + h + ":" + (port && *port ? port : "443");
  }
  o.token_file = std::string(kServiceAccountDir) + "/token";
  o.ca_file = std::string(kServiceAccountDir) + "/ca.crt";
  return o;
}

ApiClient::ApiClient(ApiServerOptions options) : options_(std::move(options)) {}

void ApiClient::set_cancelled(bool cancelled) {
  {
    std::lock_guard lock(cancel_mutex_);
    cancelled_ = cancelled;
  }
  cancel_cv_.notify_all();
}

Result<std::string> ApiClient::token() const {
  if (options_.token_file.empty()) return std::string();
  // The kubelet writes the pod's service-account volume as an atomic writer does: `token` is a
  // symlink to `..data/token`, `..data` one to the current timestamped directory, swapped on each
  // rotation. The directory is the kubelet's (read-only in the pod), so its links are followed, as
  // every Kubernetes client does; what is opened must still be a regular file (O_NONBLOCK: a FIFO
  // never blocks the request), read with a bound.
  const int fd = ::open(options_.token_file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return make_error("service-account token: cannot open " + options_.token_file + ": " +
                      fs::errno_text(errno));
  fs::UniqueFd owned(fd);
  auto text = fs::read_fd_bounded(fd, kMaxTokenBytes);
  if (!text) return make_error("service-account token " + options_.token_file + ": " + text.error());
  std::string t = *text;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
  if (t.empty()) return make_error("service-account token " + options_.token_file + " is empty");
  return t;
}

Result<ApiResponse> ApiClient::once(const std::string& method, const std::string& path,
                                    const std::string& body, const std::string& content_type,
                                    std::chrono::milliseconds timeout,
                                    const std::function<bool(const char*, std::size_t)>& stream) {
  if (options_.url.empty())
    return make_error("no API server address (KUBERNETES_SERVICE_HOST unset, no --api-server)");
  auto bearer = token();
  if (!bearer) return make_error(bearer.error());
  httplib::Client client(options_.url);
  if (!client.is_valid()) return make_error("API server address " + options_.url + " is not usable");
  if (!options_.ca_file.empty()) client.set_ca_cert_path(options_.ca_file.c_str());
  client.enable_server_certificate_verification(true);
  if (!bearer->empty()) client.set_bearer_token_auth(bearer->c_str());
  const auto seconds = static_cast<time_t>(std::max<long>(1, static_cast<long>(timeout.count() / 1000)));
  // The connection to the millisecond: a connect cannot be stopped from the deadline's thread, and a
  // stopping daemon's last request (the Lease's release) has less than a second.
  const long long connect_ms = std::max<long long>(1, timeout.count());
  client.set_connection_timeout(static_cast<time_t>(connect_ms / 1000),
                                static_cast<time_t>((connect_ms % 1000) * 1000));
  client.set_read_timeout(seconds, 0);
  client.set_write_timeout(seconds, 0);
  client.set_keep_alive(false);
  httplib::Headers headers = {{"Accept", "application/json"}, {"User-Agent", options_.user_agent}};

  std::string received;
  bool too_big = false;
  const std::size_t limit = stream ? options_.max_event_bytes : options_.max_response_bytes;
  auto receive = [&](const char* data, std::size_t length) {
    if (stream) return stream(data, length);
    if (received.size() + length > limit) {
      too_big = true;
      return false;
    }
    received.append(data, length);
    return true;
  };
  int status = 0;
  auto on_response = [&](const httplib::Response& r) {
    status = r.status;
    return true;
  };

  if (cancelled_) return make_error(method + " " + path + ": cancelled (the daemon is stopping)");
  Deadline deadline(client, timeout, cancelled_);
  httplib::Result result{nullptr, httplib::Error::Unknown};
  if (method == "GET") {
    result = client.Get(path.c_str(), headers, on_response, receive);
  } else {
    httplib::Request req;
    req.method = method;
    req.path = path;
    req.headers = headers;
    if (!body.empty()) {
      req.body = body;
      req.set_header("Content-Type", content_type);
    }
    req.response_handler = on_response;
    req.content_receiver = [&](const char* data, std::size_t length, std::uint64_t, std::uint64_t) {
      return receive(data, length);
    };
    result = client.send(req);
  }
  if (deadline.expired())
    return make_error(method + " " + path + ": no complete answer within " + std::to_string(timeout.count()) +
                      " ms");
  if (cancelled_) return make_error(method + " " + path + ": cancelled (the daemon is stopping)");
  if (too_big)
    return make_error(method + " " + path + ": answer larger than " + std::to_string(limit) + " bytes");
  if (!result && !(stream && status != 0))
    return make_error(method + " " + path + ": " + httplib::to_string(result.error()));
  ApiResponse response;
  response.status = result ? result->status : status;
  if (!received.empty()) {
    json doc;
    if (!parse_untrusted_json(received, doc)) response.body = std::move(doc);
  }
  return response;
}

Result<ApiResponse> ApiClient::request(const std::string& method, const std::string& path,
                                       const std::optional<json>& body, const std::string& content_type) {
  const std::string text = body ? json_text(*body) : std::string();
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::chrono::milliseconds wait = options_.backoff;
  std::string last;
  unsigned attempts = 0;
  for (unsigned attempt = 0;; ++attempt) {
    ++attempts;
    auto r = once(method, path, text, content_type, options_.timeout);
    if (r && !transient(r->status)) return r;
    last = r ? method + " " + path + ": HTTP " + std::to_string(r->status) : r.error();
    if (attempt >= options_.retries || cancelled_) break;
    // Full jitter: many nodes retrying at once must not arrive at once.
    const auto sleep =
        std::chrono::milliseconds(std::uniform_int_distribution<long>(wait.count() / 2, wait.count())(rng));
    std::unique_lock lock(cancel_mutex_);
    if (cancel_cv_.wait_for(lock, sleep, [this] { return cancelled_.load(); })) break;
    wait = std::min(wait * 2, std::chrono::milliseconds(10000));
  }
  if (attempts == 1) return make_error(last);
  return make_error(last + " after " + std::to_string(attempts) + " attempts");
}

Result<WatchEnd> ApiClient::watch(const std::string& path, const std::string& query,
                                  const std::string& resource_version, std::chrono::seconds timeout,
                                  const std::function<bool(const WatchEvent&)>& on_event) {
  WatchEnd end;
  end.resource_version = resource_version;
  std::string line;
  bool stopped = false, malformed = false;
  auto stream = [&](const char* data, std::size_t length) {
    for (std::size_t i = 0; i < length; ++i) {
      if (data[i] != '\n') {
        line += data[i];
        if (line.size() > options_.max_event_bytes) {
          malformed = true;
          return false;
        }
        continue;
      }
      json doc;
      if (parse_untrusted_json(line, doc) || !doc.is_object() || !doc.contains("type") ||
          !doc["type"].is_string()) {
        malformed = true;
        return false;
      }
      line.clear();
      WatchEvent event{doc["type"].get<std::string>(), doc.value("object", json())};
      if (event.type == "ERROR") {
        if (event.object.is_object() && event.object.value("code", 0) == 410) end.gone = true;
        return false;
      }
      if (event.object.is_object() && event.object.contains("metadata") &&
          event.object["metadata"].is_object()) {
        const auto& md = event.object["metadata"];
        if (md.contains("resourceVersion") && md["resourceVersion"].is_string())
          end.resource_version = md["resourceVersion"].get<std::string>();
      }
      if (!on_event(event)) {
        stopped = true;
        return false;
      }
    }
    return true;
  };
  std::string full =
      path + "?watch=1&allowWatchBookmarks=true&timeoutSeconds=" + std::to_string(timeout.count());
  if (!resource_version.empty()) full += "&resourceVersion=" + resource_version;
  if (!query.empty()) full += "&" + query;
  auto r =
      once("GET", full, {}, "application/json",
           std::chrono::duration_cast<std::chrono::milliseconds>(timeout) + std::chrono::seconds(5), stream);
  if (end.gone) return end;
  if (malformed) return make_error("watch " + path + ": malformed event");
  if (stopped) return end;
  if (!r) {
    // The server closing the stream at its timeout is the normal end of a watch.
    if (r.error().find("no complete answer") != std::string::npos) return end;
    return make_error(r.error());
  }
  if (r->status == 410) {
    end.gone = true;
    return end;
  }
  if (r->status != 200) return make_error("watch " + path + ": HTTP " + std::to_string(r->status));
  return end;
}

Result<json> ApiClient::get_claim(const std::string& ns, const std::string& name) {
  if (!valid_object_name(ns) || !valid_object_name(name))
    return make_error("claim " + config::detail::printable(ns + "/" + name, 80) +
                      " is not a valid object name");
  auto r = request("GET", "/apis/resource.k8s.io/v1/namespaces/" + ns + "/resourceclaims/" + name);
  if (!r) return make_error(r.error());
  if (r->status != 200) return make_error(api_status_error("reading the claim", *r));
  if (!r->body.is_object()) return make_error("the API server's answer is not a JSON object");
  return r->body;
}

}  // namespace gpuslice::node::dra

namespace gpuslice::node::dra {

Result<bool> ApiClient::report_prepared(const ClaimRef& ref, const std::vector<PreparedDevice>& devices) {
  if (!valid_object_name(ref.ns) || !valid_object_name(ref.name))
    return make_error("not a valid object name");
  json entries = json::array();
  for (const auto& d : devices) {
    json data = {
        {"uuid", d.gpu_uuid}, {"memoryBytes", d.memory_bytes}, {"computePercent", d.compute_percent}};
    entries.push_back(
        {{"driver", options_.driver},
         {"pool", d.pool},
         {"device", d.device},
         {"conditions", json::array({{{"type", "Ready"},
                                      {"status", "True"},
                                      {"reason", "Prepared"},
                                      {"message", "limits file and CDI spec written; gpuslice enforces them"},
                                      {"lastTransitionTime", rfc3339_now()}}})},
         {"data", data}});
    if (!d.share_id.empty()) entries.back()["shareID"] = d.share_id;
  }
  const json apply = {{"apiVersion", "resource.k8s.io/v1"},
                      {"kind", "ResourceClaim"},
                      {"metadata", {{"name", ref.name}, {"namespace", ref.ns}}},
                      {"status", {{"devices", entries}}}};
  auto r = request("PATCH",
                   "/apis/resource.k8s.io/v1/namespaces/" + ref.ns + "/resourceclaims/" + ref.name +
                       "/status?fieldManager=" + options_.driver + "&force=true",
                   apply, "application/apply-patch+yaml");
  if (!r) return make_error(r.error());
  if (r->status != 200) return make_error("HTTP " + std::to_string(r->status));
  return true;
}

}  // namespace gpuslice::node::dra
