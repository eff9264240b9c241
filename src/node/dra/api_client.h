// A small client of the Kubernetes API server for the DRA driver, on cpp-httplib (TLS through
// OpenSSL) and nlohmann-json: the pod's service-account token (read again for every request, as
// the kubelet rotates it) and CA, a deadline on every request however slowly the server answers,
// bounded response sizes, retries with exponential backoff and jitter for transient failures
// (connection errors, 429, 5xx), and watches that report 410 Gone so the caller re-lists.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"
#include "node/dra/claim_preparer.h"

namespace gpuslice::node::dra {

inline constexpr const char* kServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount";

struct ApiServerOptions {
  std::string url;         // "https://10.96.0.1:443"; empty: from KUBERNETES_SERVICE_HOST/PORT
  std::string token_file;  // empty: no Authorization header
  std::string ca_file;     // empty with https: the system's trust store
  std::chrono::milliseconds timeout{10000};  // per request, start to end
  std::size_t max_response_bytes = 8u << 20;
  std::size_t max_event_bytes = 1u << 20;
  unsigned retries = 4;
  std::chrono::milliseconds backoff{200};  // first retry; doubled each time, with jitter
  std::string user_agent = "gpuslice-node-dra";
  std::string driver = "gpuslice.io";  // field manager of status writes
};

// The in-cluster defaults: the API server's Service address and the service account's files.
ApiServerOptions in_cluster_options(const std::function<const char*(const char*)>& env);

// NOLINTNEXTLINE(bugprone-exception-escape): json's move is noexcept; the check sees its assert.
struct ApiResponse {
  int status = 0;
  nlohmann::json body;  // null when the body was empty or not JSON
};

struct WatchEvent {
  std::string type;  // ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
  nlohmann::json object;
};

struct WatchEnd {
  bool gone = false;             // 410: the resourceVersion is too old; list again
  std::string resource_version;  // the last one seen (to resume from)
};

class ApiClient final : public ClaimSource {
 public:
  explicit ApiClient(ApiServerOptions options);

  // One request with retries; `body` is sent as JSON. A non-2xx answer is a response, not an
  // error; an error is a failure to get any answer in time.
  Result<ApiResponse> request(const std::string& method, const std::string& path,
                              const std::optional<nlohmann::json>& body = std::nullopt,
                              const std::string& content_type = "application/json");

  // GET of a watch (path without query) from `resource_version`, for at most `timeout`; calls
  // `on_event` per event until it returns false or the server ends the stream.
  Result<WatchEnd> watch(const std::string& path, const std::string& query,
                         const std::string& resource_version, std::chrono::seconds timeout,
                         const std::function<bool(const WatchEvent&)>& on_event);

  // ClaimSource: GET resource.k8s.io/v1 ResourceClaim.
  Result<nlohmann::json> get_claim(const std::string& ns, const std::string& name) override;
  // Server-side apply of status.devices (field manager = the driver), so entries of other drivers
  // in the same claim are left alone.
  Result<bool> report_prepared(const ClaimRef& ref, const std::vector<PreparedDevice>& devices) override;

  const ApiServerOptions& options() const { return options_; }

  // While set, requests fail at once and one in flight is cut off within about 20 ms (a stopping
  // daemon does not wait out a watch); cleared again for the last requests of a shutdown.
  void set_cancelled(bool cancelled);

 private:
  Result<ApiResponse> once(const std::string& method, const std::string& path, const std::string& body,
                           const std::string& content_type, std::chrono::milliseconds timeout,
                           const std::function<bool(const char*, std::size_t)>& stream = {});
  Result<std::string> token() const;

  ApiServerOptions options_;
  std::atomic<bool> cancelled_{false};
  std::mutex cancel_mutex_;  // with cancel_cv_: a wait between retries ends when cancelled
  std::condition_variable cancel_cv_;
};

// A time as the API's fields write it (RFC 3339, UTC, whole seconds: "2026-11-29T06:30:00Z").
std::string rfc3339(std::chrono::system_clock::time_point t);

// The API server's text as it may reach a log line, a status or an error: control bytes escaped,
// at most about `max_chars` (4 KiB: a 422 lists every field it refused), cut at a word boundary
// with "...".
inline constexpr std::size_t kMaxApiMessageChars = 4096;
std::string api_message(std::string_view text, std::size_t max_chars = kMaxApiMessageChars);
// "<what>: HTTP <status>: <the Status object's message>".
std::string api_status_error(const std::string& what, const ApiResponse& response);

}  // namespace gpuslice::node::dra
