#include "node/admission/webhook_server.h"

#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <chrono>
#include <mutex>

#include "common/log.h"

namespace gpuslice::node {
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

struct SslCtxFree {
  void operator()(SSL_CTX* ctx) const { SSL_CTX_free(ctx); }
};

struct WebhookServer::Impl {
  WebhookServerOptions server_options;
  WebhookOptions options;
  CertStore certs;
  std::unique_ptr<BoundedServer> server;

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
  std::unique_ptr<SSL_CTX, SslCtxFree> ctx(SSL_CTX_new(TLS_server_method()));
  if (!ctx) return make_error("cannot set up TLS");
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_options(ctx.get(), SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_cert_cb(ctx.get(), use_current_certificate, &m.certs);
  m.server = std::make_unique<BoundedServer>(m.server_options.limits, ctx.get());
  m.server->Post("/mutate", [&m](const httplib::Request& req, httplib::Response& res) {
    WebhookReply reply = review_admission(req.body, m.options);
    res.status = reply.http_status;
    res.set_content(reply.body, "application/json");
  });
  m.server->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  m.server->set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.body.empty() && res.status == 413) {
      res.set_content("{\"error\":\"gpuslice-webhook: request body too large\"}", "application/json");
    }
  });
  auto port = m.server->bind_port(m.server_options.host, m.server_options.port);
  if (!port) return make_error(port.error());
  m.server->start_serving();
  GS_LOG(Info, "webhook: serving HTTPS on %s:%d (POST /mutate)", m.server_options.host.c_str(), *port);
  return *port;
}

void WebhookServer::stop() {
  if (impl_ && impl_->server) impl_->server->stop_serving();
}

}  // namespace gpuslice::node
