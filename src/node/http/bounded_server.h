// The HTTP(S) server under the daemon's API and the webhook: cpp-httplib's routing and request
// parsing, with the connection handling replaced so that hostile clients cannot stop it.
//   - one thread per connection up to a cap (and a smaller cap per client address); at the cap a
//     newcomer takes the place of the connection that has waited longest on its client (idle, or its
//     request incomplete), else it is answered 503 and closed by the accept thread without waiting;
//   - a whole request (headers and body) must arrive within request_timeout, however slowly it
//     trickles in; an idle kept-alive connection is closed after idle_timeout;
//   - header and body sizes are bounded while reading: a Content-Length over the limit is answered
//     413 at once, without reading (or waiting for) the body;
//   - the listening socket never sets SO_REUSEPORT, so a second daemon on the same port fails to bind.
// cpp-httplib 0.11 bounds none of these itself (its per-read timeout restarts with every byte).
#pragma once

#include <httplib.h>
#include <openssl/ssl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/result.h"

namespace gpuslice::node {

struct ServerLimits {
  std::size_t max_connections = 128;
  std::size_t max_connections_per_client = 32;  // per remote IP address
  std::chrono::milliseconds request_timeout{10000};
  std::chrono::milliseconds idle_timeout{5000};
  std::size_t max_header_bytes = std::size_t{16} * 1024;
  std::size_t max_body_bytes = std::size_t{64} * 1024;
  std::size_t max_requests_per_connection = 1000;
};

class BoundedServer : public httplib::Server {
 public:
  // `tls` (optional) is used for every connection; the server keeps its own reference.
  explicit BoundedServer(ServerLimits limits, SSL_CTX* tls = nullptr);
  ~BoundedServer() override;
  BoundedServer(const BoundedServer&) = delete;
  BoundedServer& operator=(const BoundedServer&) = delete;

  // Binds host:port (0: any free port) with SO_REUSEADDR only; returns the bound port. An occupied
  // port is an error naming it.
  Result<int> bind_port(const std::string& host, int port);
  // Serves on a background thread until stop_serving().
  void start_serving();
  void stop_serving();

  const ServerLimits& limits() const { return limits_; }

 private:
  bool process_and_close_socket(socket_t sock) override;
  void serve_connection(socket_t sock);
  bool enter(const std::string& client);
  void leave(const std::string& client);
  // Shuts down the connection that has waited longest on its client, for a newcomer from `client`;
  // false when none waits or `client` is at its own cap.
  bool make_room(const std::string& client);
  void register_connection(socket_t sock, std::atomic<std::int64_t>& waiting_since);
  void unregister_connection(socket_t sock);

  // A connection being served: since when it waits on its client (see Connection), and whether
  // make_room has shut it down already.
  struct Served {
    socket_t sock;
    std::atomic<std::int64_t>* waiting_since;
    bool evicted;
  };

  ServerLimits limits_;
  SSL_CTX* tls_ = nullptr;
  std::thread thread_;
  std::mutex mutex_;
  std::map<std::string, std::size_t> per_client_;
  std::map<socket_t, Served> served_;
  std::size_t evicted_ = 0;  // in served_, shut down, their threads not yet gone
};

}  // namespace gpuslice::node
