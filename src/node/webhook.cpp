#include "node/webhook.h"

#include <httplib.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "common/log.h"
#include "node/quantity.h"

namespace gpuslice::node {
namespace {

using nlohmann::json;

const json* member(const json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

std::string base64(std::string_view data) {
  std::string out(4 * ((data.size() + 2) / 3), '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(data.data()), static_cast<int>(data.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

// JSON Pointer escaping of one reference token (RFC 6901).
std::string pointer_token(std::string_view token) {
  std::string out;
  for (char c : token) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

WebhookReply structural_error(const std::string& message) {
  GS_LOG(Warn, "webhook: rejected malformed AdmissionReview: %s", message.c_str());
  return {400, json{{"error", "gpuslice-webhook: " + message}}.dump()};
}

json review_envelope(json response) {
  return {
      {"apiVersion", "admission.k8s.io/v1"}, {"kind", "AdmissionReview"}, {"response", std::move(response)}};
}

WebhookReply allow(const std::string& uid) {
  return {200, review_envelope({{"uid", uid}, {"allowed", true}}).dump()};
}

WebhookReply deny(const std::string& uid, const std::string& message) {
  GS_LOG(Warn, "webhook: denied %s: %s", uid.c_str(), message.c_str());
  json status = {
      {"code", 400}, {"reason", "BadRequest"}, {"status", "Failure"}, {"message", "gpuslice: " + message}};
  return {200, review_envelope({{"uid", uid}, {"allowed", false}, {"status", std::move(status)}}).dump()};
}

struct ContainerNeeds {
  std::optional<std::uint64_t> hcs_bytes;  // ai.compute/vram
  bool device_plugin = false;              // <domain>/vram or <domain>/cores
};

// Reads one resource of a container from limits, else requests (extended resources must agree).
std::optional<std::string> read_resource(const json& container, const std::string& name, std::string& error) {
  const json* resources = member(container, "resources");
  for (const char* section : {"limits", "requests"}) {
    const json* values = resources ? member(*resources, section) : nullptr;
    const json* value = values ? member(*values, name.c_str()) : nullptr;
    if (!value) continue;
    if (value->is_string()) return value->get<std::string>();
    if (value->is_number_unsigned()) return std::to_string(value->get<std::uint64_t>());
    error = "resources." + std::string(section) + "[\"" + name + "\"] must be a quantity string";
    return std::nullopt;
  }
  return std::nullopt;
}

std::optional<std::string> container_needs(const json& container, const std::string& where,
                                           const WebhookOptions& options, ContainerNeeds& needs) {
  std::string error;
  if (auto text = read_resource(container, kHcsVramResource, error)) {
    auto bytes = parse_quantity(*text);
    if (!bytes) return where + ": " + kHcsVramResource + ": " + bytes.error();
    if (*bytes == 0) return where + ": " + kHcsVramResource + " must be greater than zero";
    needs.hcs_bytes = *bytes;
  }
  if (!error.empty()) return where + ": " + error;
  for (const char* suffix : {"vram", "cores"}) {
    const std::string name = options.resource_domain + "/" + suffix;
    if (auto text = read_resource(container, name, error)) {
      auto count = parse_quantity(*text);
      if (!count) return where + ": " + name + ": " + count.error();
      if (*count == 0) return where + ": " + name + " must be a positive whole number of devices";
      needs.device_plugin = true;
    }
    if (!error.empty()) return where + ": " + error;
  }
  if (needs.hcs_bytes && needs.device_plugin) {
    return where + " requests both " + kHcsVramResource + " and " + options.resource_domain +
           "/vram|cores; use one of them";
  }
  return std::nullopt;
}

bool preload_has(std::string_view value, std::string_view library) {
  // ld.so separates LD_PRELOAD entries with ':' or spaces.
  std::size_t start = 0;
  while (start <= value.size()) {
    std::size_t end = value.find_first_of(": ", start);
    if (end == std::string_view::npos) end = value.size();
    if (value.substr(start, end - start) == library) return true;
    start = end + 1;
  }
  return false;
}

// Adds the env, mount and volume operations for one container to `patch`.
std::optional<std::string> mutate_container(const json& container, const std::string& path,
                                            const std::string& where, const ContainerNeeds& needs,
                                            const std::string& state_volume, json& patch,
                                            std::vector<std::string>& warnings) {
  const std::string library = std::string(kContainerLibrary);
  const json* env = member(container, "env");
  if (env && !env->is_array() && !env->is_null()) return where + ": env is not a list";

  std::vector<json> wanted;
  std::string preload = library;
  if (env && env->is_array()) {
    for (const auto& var : *env) {
      const json* name = member(var, "name");
      if (!name || !name->is_string() || name->get<std::string>() != "LD_PRELOAD") continue;
      if (member(var, "valueFrom")) {
        return where + " sets LD_PRELOAD from valueFrom; gpuslice cannot prepend its library to it";
      }
      const json* value = member(var, "value");
      std::string existing = value && value->is_string() ? value->get<std::string>() : "";
      preload = preload_has(existing, library) ? existing
                : existing.empty()             ? library
                                               : library + ":" + existing;
    }
  }
  wanted.push_back({{"name", "LD_PRELOAD"}, {"value", preload}});
  if (needs.hcs_bytes)
    wanted.push_back({{"name", "GPUSLICE_MEMORY_LIMIT"}, {"value", std::to_string(*needs.hcs_bytes)}});

  if (!env || env->is_null()) {
    patch.push_back({{"op", "add"}, {"path", path + "/env"}, {"value", wanted}});
  } else {
    for (const auto& var : wanted) {
      std::optional<std::size_t> at;
      for (std::size_t j = 0; j < env->size(); ++j) {
        const json* name = member((*env)[j], "name");
        if (name && name->is_string() && *name == var["name"]) at = j;
      }
      if (at) {
        patch.push_back({{"op", "replace"}, {"path", path + "/env/" + std::to_string(*at)}, {"value", var}});
      } else {
        patch.push_back({{"op", "add"}, {"path", path + "/env/-"}, {"value", var}});
      }
    }
  }

  if (!needs.hcs_bytes) return std::nullopt;
  std::vector<json> mounts = {
      {{"name", kLibraryVolume}, {"mountPath", kContainerLibraryDir}, {"readOnly", true}},
      {{"name", state_volume}, {"mountPath", kContainerSharedDir}},
  };
  const json* existing = member(container, "volumeMounts");
  if (existing && !existing->is_array() && !existing->is_null())
    return where + ": volumeMounts is not a list";
  std::vector<json> to_add;
  for (const auto& mount : mounts) {
    bool taken = false;
    if (existing && existing->is_array()) {
      for (const auto& m : *existing) {
        const json* mount_path = member(m, "mountPath");
        if (mount_path && *mount_path == mount["mountPath"]) taken = true;
      }
    }
    if (taken) {
      warnings.push_back(where + " already mounts " + mount["mountPath"].get<std::string>() +
                         "; left as it is");
    } else {
      to_add.push_back(mount);
    }
  }
  if (!existing || existing->is_null()) {
    if (!to_add.empty())
      patch.push_back({{"op", "add"}, {"path", path + "/volumeMounts"}, {"value", to_add}});
  } else {
    for (const auto& m : to_add)
      patch.push_back({{"op", "add"}, {"path", path + "/volumeMounts/-"}, {"value", m}});
  }
  return std::nullopt;
}

}  // namespace

WebhookReply review_admission(std::string_view body, const WebhookOptions& options) {
  json review = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (review.is_discarded()) return structural_error("request body is not valid JSON");
  if (!review.is_object()) return structural_error("request body is not a JSON object");
  const json* api_version = member(review, "apiVersion");
  const json* kind = member(review, "kind");
  if (!api_version || *api_version != "admission.k8s.io/v1" || !kind || *kind != "AdmissionReview") {
    return structural_error("expected apiVersion admission.k8s.io/v1 and kind AdmissionReview, got " +
                            (api_version ? api_version->dump() : std::string("no apiVersion")) + " / " +
                            (kind ? kind->dump() : std::string("no kind")));
  }
  const json* request = member(review, "request");
  if (!request || !request->is_object()) return structural_error("AdmissionReview has no request object");
  const json* uid_value = member(*request, "uid");
  if (!uid_value || !uid_value->is_string() || uid_value->get<std::string>().empty()) {
    return structural_error("request.uid is missing or empty");
  }
  const std::string uid = uid_value->get<std::string>();

  const json* request_kind = member(*request, "kind");
  const json* kind_name = request_kind ? member(*request_kind, "kind") : nullptr;
  const json* operation = member(*request, "operation");
  if (!kind_name || *kind_name != "Pod") return allow(uid);  // only pods are ours
  if (operation && operation->is_string() && *operation != "CREATE") return allow(uid);

  const json* pod = member(*request, "object");
  if (!pod || !pod->is_object()) return deny(uid, "request.object is missing or not a Pod object");
  const json* metadata = member(*pod, "metadata");
  const json* annotations = metadata ? member(*metadata, "annotations") : nullptr;
  if (annotations && annotations->is_object()) {
    const json* opt = member(*annotations, kInjectAnnotation);
    if (opt && *opt == "false") return allow(uid);
    const json* done = member(*annotations, kInjectedAnnotation);
    if (done && *done == "true") return allow(uid);  // reinvocation: already mutated
  }
  const json* spec = member(*pod, "spec");
  if (!spec || !spec->is_object()) return deny(uid, "pod has no spec");

  json patch = json::array();
  std::vector<std::string> warnings;
  std::vector<std::string> state_volumes;
  bool mutated = false;
  for (const char* list : {"initContainers", "containers"}) {
    const json* containers = member(*spec, list);
    if (!containers || containers->is_null()) continue;
    if (!containers->is_array()) return deny(uid, std::string("spec.") + list + " is not a list");
    for (std::size_t i = 0; i < containers->size(); ++i) {
      const json& container = (*containers)[i];
      if (!container.is_object())
        return deny(uid, std::string("spec.") + list + "[" + std::to_string(i) + "] is not an object");
      const json* name = member(container, "name");
      const std::string where =
          "container \"" + (name && name->is_string() ? name->get<std::string>() : "?") + "\"";
      ContainerNeeds needs;
      if (auto err = container_needs(container, where, options, needs)) return deny(uid, *err);
      if (!needs.hcs_bytes && !needs.device_plugin) continue;
      const std::string volume =
          std::string(kStateVolumePrefix) + (list[0] == 'i' ? "i" : "c") + std::to_string(i);
      const std::string path = std::string("/spec/") + list + "/" + std::to_string(i);
      if (auto err = mutate_container(container, path, where, needs, volume, patch, warnings))
        return deny(uid, *err);
      if (needs.hcs_bytes) state_volumes.push_back(volume);
      mutated = true;
    }
  }
  if (!mutated) return allow(uid);

  if (!state_volumes.empty()) {
    std::vector<json> volumes = {
        {{"name", kLibraryVolume},
         {"hostPath", {{"path", options.host_root + "/lib"}, {"type", "Directory"}}}}};
    for (const auto& v : state_volumes) volumes.push_back({{"name", v}, {"emptyDir", json::object()}});
    const json* existing = member(*spec, "volumes");
    if (existing && !existing->is_array() && !existing->is_null())
      return deny(uid, "spec.volumes is not a list");
    std::vector<json> to_add;
    for (const auto& v : volumes) {
      bool present = false;
      if (existing && existing->is_array()) {
        for (const auto& e : *existing) {
          const json* n = member(e, "name");
          if (n && *n == v["name"]) present = true;
        }
      }
      if (!present) to_add.push_back(v);
    }
    if (!existing || existing->is_null()) {
      patch.push_back({{"op", "add"}, {"path", "/spec/volumes"}, {"value", to_add}});
    } else {
      for (const auto& v : to_add)
        patch.push_back({{"op", "add"}, {"path", "/spec/volumes/-"}, {"value", v}});
    }
  }
  if (!metadata || !metadata->is_object()) {
    patch.push_back({{"op", "add"},
                     {"path", "/metadata"},
                     {"value", {{"annotations", {{kInjectedAnnotation, "true"}}}}}});
  } else if (!annotations || annotations->is_null()) {
    patch.push_back(
        {{"op", "add"}, {"path", "/metadata/annotations"}, {"value", {{kInjectedAnnotation, "true"}}}});
  } else {
    patch.push_back({{"op", "add"},
                     {"path", "/metadata/annotations/" + pointer_token(kInjectedAnnotation)},
                     {"value", "true"}});
  }

  json response = {
      {"uid", uid}, {"allowed", true}, {"patchType", "JSONPatch"}, {"patch", base64(patch.dump())}};
  if (!warnings.empty()) response["warnings"] = warnings;
  return {200, review_envelope(std::move(response)).dump()};
}

// ---- TLS server ----------------------------------------------------------------------------------

namespace {

struct CertPair {
  X509* cert = nullptr;
  EVP_PKEY* key = nullptr;
  STACK_OF(X509) * chain = nullptr;
  CertPair() = default;
  CertPair(const CertPair&) = delete;
  CertPair& operator=(const CertPair&) = delete;
  ~CertPair() {
    X509_free(cert);
    EVP_PKEY_free(key);
    if (chain) sk_X509_pop_free(chain, X509_free);
  }
};

Result<std::shared_ptr<CertPair>> load_pair(const std::string& cert_file, const std::string& key_file) {
  auto pair = std::make_shared<CertPair>();
  BIO* bio = BIO_new_file(cert_file.c_str(), "r");
  if (!bio) return make_error("cannot read TLS certificate " + cert_file);
  pair->cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  pair->chain = sk_X509_new_null();
  while (X509* extra = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) sk_X509_push(pair->chain, extra);
  BIO_free(bio);
  if (!pair->cert) return make_error(cert_file + " holds no PEM certificate");
  bio = BIO_new_file(key_file.c_str(), "r");
  if (!bio) return make_error("cannot read TLS key " + key_file);
  pair->key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (!pair->key) return make_error(key_file + " holds no PEM private key");
  if (X509_check_private_key(pair->cert, pair->key) != 1) {
    return make_error("TLS key " + key_file + " does not match certificate " + cert_file);
  }
  return pair;
}

std::int64_t mtime_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return -1;
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

// Serves the current certificate; reloads it when either file changes, checked at most every 2 s.
class CertStore {
 public:
  CertStore(std::string cert_file, std::string key_file)
      : cert_file_(std::move(cert_file)), key_file_(std::move(key_file)) {}

  Result<bool> load() {
    auto pair = load_pair(cert_file_, key_file_);
    if (!pair) return make_error(pair.error());
    std::lock_guard lock(mutex_);
    current_ = std::move(pair).value();
    stamp_ = mtime_of(cert_file_) ^ (mtime_of(key_file_) << 1);
    checked_ = std::chrono::steady_clock::now();
    return true;
  }

  std::shared_ptr<CertPair> current() {
    std::lock_guard lock(mutex_);
    auto now = std::chrono::steady_clock::now();
    if (now - checked_ > std::chrono::seconds(2)) {
      checked_ = now;
      std::int64_t stamp = mtime_of(cert_file_) ^ (mtime_of(key_file_) << 1);
      if (stamp != stamp_) {
        auto pair = load_pair(cert_file_, key_file_);
        if (pair) {
          current_ = std::move(pair).value();
          stamp_ = stamp;
          GS_LOG(Info, "webhook: reloaded TLS certificate %s", cert_file_.c_str());
        } else {
          // Mid-rotation the two files may not match yet: keep serving the old pair, retry later.
          GS_LOG(Warn, "webhook: keeping the previous certificate: %s", pair.error().c_str());
        }
      }
    }
    return current_;
  }

 private:
  std::string cert_file_, key_file_;
  std::mutex mutex_;
  std::shared_ptr<CertPair> current_;
  std::int64_t stamp_ = 0;
  std::chrono::steady_clock::time_point checked_;
};

int use_current_certificate(SSL* ssl, void* arg) {
  auto pair = static_cast<CertStore*>(arg)->current();
  if (!pair) return 0;
  if (SSL_use_certificate(ssl, pair->cert) != 1 || SSL_use_PrivateKey(ssl, pair->key) != 1) return 0;
  if (SSL_set1_chain(ssl, pair->chain) != 1) return 0;
  return 1;
}

}  // namespace

struct WebhookServer::Impl {
  WebhookServerOptions server_options;
  WebhookOptions options;
  CertStore certs;
  std::unique_ptr<httplib::SSLServer> server;
  std::thread thread;
  std::atomic<bool> listen_returned{false};

  Impl(WebhookServerOptions s, WebhookOptions o)
      : server_options(std::move(s)),
        options(std::move(o)),
        certs(server_options.tls_cert_file, server_options.tls_key_file) {}
};

WebhookServer::WebhookServer(WebhookServerOptions server, WebhookOptions options)
    : impl_(std::make_unique<Impl>(std::move(server), std::move(options))) {}

WebhookServer::~WebhookServer() { stop(); }

Result<int> WebhookServer::start() {
  Impl& m = *impl_;
  if (auto loaded = m.certs.load(); !loaded) return make_error(loaded.error());
  m.server = std::make_unique<httplib::SSLServer>([&m](SSL_CTX& ctx) {
    SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION);
    SSL_CTX_set_cert_cb(&ctx, use_current_certificate, &m.certs);
    return true;
  });
  if (!m.server->is_valid()) return make_error("cannot set up TLS");
  m.server->Post("/mutate", [&m](const httplib::Request& req, httplib::Response& res) {
    WebhookReply reply = review_admission(req.body, m.options);
    res.status = reply.http_status;
    res.set_content(reply.body, "application/json");
  });
  m.server->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  m.server->set_payload_max_length(8 * 1024 * 1024);
  m.server->set_tcp_nodelay(true);
  unsigned threads = m.server_options.threads ? m.server_options.threads : 1;
  m.server->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };

  int port = m.server_options.port;
  if (port == 0) {
    port = m.server->bind_to_any_port(m.server_options.host);
    if (port < 0) return make_error("cannot bind " + m.server_options.host + ":0");
  } else if (!m.server->bind_to_port(m.server_options.host, port)) {
    return make_error("cannot bind " + m.server_options.host + ":" + std::to_string(port));
  }
  m.listen_returned = false;
  m.thread = std::thread([&m] {
    m.server->listen_after_bind();
    m.listen_returned = true;
  });
  while (!m.server->is_running() && !m.listen_returned)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  GS_LOG(Info, "webhook: serving HTTPS on %s:%d (POST /mutate)", m.server_options.host.c_str(), port);
  return port;
}

void WebhookServer::stop() {
  if (!impl_ || !impl_->thread.joinable()) return;
  impl_->server->stop();
  impl_->thread.join();
}

}  // namespace gpuslice::node
