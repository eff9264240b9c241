#include "node/http/bounded_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <list>

#include "common/errno_text.h"
#include "common/log.h"

namespace gpuslice::node {
namespace {

using SteadyClock = std::chrono::steady_clock;

// Set on the accept thread while it decides on a connection beyond the cap; t_admitted is the verdict.
thread_local bool t_over_capacity = false;
thread_local bool t_admitted = false;

// One thread per connection, at most `max` at once. Beyond that the task first runs on the accept
// thread with t_over_capacity set: it either makes room (closes a connection that waits on its
// client, see BoundedServer::make_room) and admits, or answers 503 without reading. An admitted task
// then runs again on a thread of its own; the evicted connection's thread leaves at once.
class ConnectionThreads final : public httplib::TaskQueue {
 public:
  explicit ConnectionThreads(std::size_t max) : max_(max) {}
  ~ConnectionThreads() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    std::unique_lock lock(mutex_);
    reap(lock);
    if (running_ >= max_) {
      lock.unlock();
      t_over_capacity = true;
      t_admitted = false;
      fn();
      t_over_capacity = false;
      if (!t_admitted) return;
      lock.lock();
    }
    ++running_;
    threads_.emplace_back();
    auto self = std::prev(threads_.end());
    *self = std::thread([this, self, fn = std::move(fn)] {
      fn();
      std::lock_guard done_lock(mutex_);
      --running_;
      finished_.push_back(self);
      idle_.notify_all();
    });
  }

  void shutdown() override {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [this] { return running_ == 0; });
    reap(lock);
  }

 private:
  void reap(std::unique_lock<std::mutex>& lock) {
    std::vector<std::thread> done;
    for (auto it : finished_) {
      done.push_back(std::move(*it));
      threads_.erase(it);
    }
    finished_.clear();
    lock.unlock();
    for (auto& t : done) t.join();
    lock.lock();
  }

  const std::size_t max_;
  std::mutex mutex_;
  std::condition_variable idle_;
  std::size_t running_ = 0;
  std::list<std::thread> threads_;
  std::vector<std::list<std::thread>::iterator> finished_;
};

std::string address_of(const sockaddr_storage& addr, int& port) {
  char text[INET6_ADDRSTRLEN] = "?";
  port = 0;
  if (addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
    port = ntohs(in->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
    port = ntohs(in6->sin6_port);
  }
  return text;
}

std::string peer_of(int sock, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (getpeername(sock, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    port = 0;
    return "?";
  }
  return address_of(addr, port);
}

// Best effort, never blocks: the accept thread must not wait for a client that does not read.
void refuse(int sock, bool plain_http) {
  if (plain_http) {
    static constexpr char kBusy[] =
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
        "Retry-After: 1\r\nContent-Length: 62\r\n\r\n"
        "{\"error\":\"too many connections; try again later\",\"status\":503}";
    (void)!send(sock, kBusy, sizeof kBusy - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
}

bool header_line_is(std::string_view line, std::string_view name, std::string_view& value) {
  if (line.size() <= name.size() || line[name.size()] != ':') return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(line[i])) != name[i]) return false;
  }
  value = line.substr(name.size() + 1);
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t' || value.back() == '\r'))
    value.remove_suffix(1);
  return true;
}

// A connection as cpp-httplib's request parser sees it. Every wait is bounded by the deadline of the
// current request; the bytes a request may consume are bounded too, and reads fail once a request
// is known to be too large, so the parser answers at once instead of draining the body.
// While it waits on its client, a connection publishes since when it has (`waiting_since`, steady
// clock nanoseconds, 0 while it does not wait), so that the server can pick one to evict.
class Connection final : public httplib::Stream {
 public:
  Connection(int sock, SSL* ssl, const ServerLimits& limits, const std::atomic<socket_t>& listener,
             std::atomic<std::int64_t>& waiting_since)
      : sock_(sock), ssl_(ssl), limits_(limits), listener_(listener), waiting_since_(waiting_since) {}

  // Waits up to `timeout` for the first byte of a request. False on timeout, close or shutdown.
  bool wait_for_request(std::chrono::milliseconds timeout) {
    if (begin_ < end_ || (ssl_ && SSL_pending(ssl_) > 0)) return true;
    began_ = SteadyClock::now();
    deadline_ = began_ + timeout;
    return fill() > 0;
  }

  void begin_request() {
    began_ = SteadyClock::now();
    deadline_ = began_ + limits_.request_timeout;
    header_done_ = false;
    header_.clear();
    tail_ = 0;
    body_consumed_ = 0;
    body_budget_ = 0;
    too_large_ = false;
  }

  bool too_large() const { return too_large_; }

  bool handshake() {
    began_ = SteadyClock::now();
    deadline_ = began_ + limits_.request_timeout;
    for (;;) {
      ERR_clear_error();
      int rc = SSL_accept(ssl_);
      if (rc == 1) return true;
      int err = SSL_get_error(ssl_, rc);
      if (err == SSL_ERROR_WANT_READ) {
        if (!wait(POLLIN)) return false;
      } else if (err == SSL_ERROR_WANT_WRITE) {
        if (!wait(POLLOUT)) return false;
      } else {
        return false;
      }
    }
  }

  bool is_readable() const override { return begin_ < end_ || (ssl_ && SSL_pending(ssl_) > 0); }
  bool is_writable() const override { return true; }

  ssize_t read(char* ptr, std::size_t size) override {
    if (too_large_) return -1;
    if (begin_ == end_) {
      ssize_t n = fill();
      if (n <= 0) return n;
    }
    std::size_t n = std::min(size, end_ - begin_);
    if (!header_done_) n = std::min<std::size_t>(n, 1);  // headers are read a byte at a time anyway
    std::memcpy(ptr, buffer_ + begin_, n);
    begin_ += n;
    if (!header_done_) {
      if (!consume_header_byte(ptr[0])) return -1;
    } else {
      body_consumed_ += n;
      if (body_consumed_ > body_budget_) {
        too_large_ = true;
        return -1;
      }
    }
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, std::size_t size) override {
    const auto write_deadline = SteadyClock::now() + limits_.request_timeout;
    std::size_t done = 0;
    while (done < size) {
      ssize_t n;
      if (ssl_) {
        ERR_clear_error();
        int rc = SSL_write(ssl_, ptr + done, static_cast<int>(std::min<std::size_t>(size - done, 1 << 30)));
        if (rc > 0) {
          n = rc;
        } else {
          int err = SSL_get_error(ssl_, rc);
          const auto events = static_cast<short>(err == SSL_ERROR_WANT_READ    ? POLLIN
                                                 : err == SSL_ERROR_WANT_WRITE ? POLLOUT
                                                                               : 0);
          if (!events || !wait(events, write_deadline)) return done ? static_cast<ssize_t>(done) : -1;
          continue;
        }
      } else {
        n = ::send(sock_, ptr + done, size - done, MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
          if (!wait(POLLOUT, write_deadline)) return done ? static_cast<ssize_t>(done) : -1;
          continue;
        }
        if (n < 0) return done ? static_cast<ssize_t>(done) : -1;
      }
      done += static_cast<std::size_t>(n);
    }
    return static_cast<ssize_t>(done);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { ip = peer_of(sock_, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (getsockname(sock_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ip = "?";
      port = 0;
      return;
    }
    ip = address_of(addr, port);
  }
  socket_t socket() const override { return sock_; }

 private:
  // Polls in short slices so that a stopping server does not wait for a client's deadline. The wait
  // counts from the start of the current request (or idle wait): a client trickling a byte now and
  // then has waited as long as one that sends nothing.
  bool wait(short events, SteadyClock::time_point deadline) {
    const std::int64_t since = began_.time_since_epoch().count();
    waiting_since_.store(std::max<std::int64_t>(since, 1));
    const bool ready = poll_until(events, deadline);
    waiting_since_.store(0);
    return ready;
  }
  bool wait(short events) { return wait(events, deadline_); }

  bool poll_until(short events, SteadyClock::time_point deadline) {
    for (;;) {
      if (listener_ == INVALID_SOCKET) return false;
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now()).count();
      if (left <= 0) return false;
      pollfd p{sock_, events, 0};
      int rc = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 200)));
      if (rc < 0 && errno != EINTR) return false;
      if (rc > 0) return true;
    }
  }

  // Reads what has arrived into the buffer: >0 bytes, 0 at end of stream, -1 on error or deadline.
  ssize_t fill() {
    begin_ = end_ = 0;
    for (;;) {
      if (ssl_) {
        ERR_clear_error();
        int rc = SSL_read(ssl_, buffer_, sizeof buffer_);
        if (rc > 0) {
          end_ = static_cast<std::size_t>(rc);
          return rc;
        }
        int err = SSL_get_error(ssl_, rc);
        if (err == SSL_ERROR_ZERO_RETURN) return 0;
        const auto events = static_cast<short>(err == SSL_ERROR_WANT_READ    ? POLLIN
                                               : err == SSL_ERROR_WANT_WRITE ? POLLOUT
                                                                             : 0);
        if (!events || !wait(events)) return -1;
      } else {
        ssize_t n = ::recv(sock_, buffer_, sizeof buffer_, 0);
        if (n > 0) {
          end_ = static_cast<std::size_t>(n);
          return n;
        }
        if (n == 0) return 0;
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
        if (!wait(POLLIN)) return -1;
      }
    }
  }

  // Watches the header block go by: its size, and the body it announces.
  bool consume_header_byte(char c) {
    if (header_.size() >= limits_.max_header_bytes) {
      too_large_ = true;
      return false;
    }
    header_.push_back(c);
    tail_ = (tail_ << 8) | static_cast<unsigned char>(c);
    const bool end = (tail_ & 0xffffffffU) == 0x0d0a0d0aU || (tail_ & 0xffffU) == 0x0a0aU;
    if (!end) return true;
    header_done_ = true;
    // Chunked bodies carry framing: allow for it, the parser itself checks the payload limit.
    body_budget_ = limits_.max_body_bytes + limits_.max_body_bytes / 4 + 1024;
    std::string_view text(header_);
    std::size_t pos = 0;
    while (pos < text.size()) {
      std::size_t eol = text.find('\n', pos);
      if (eol == std::string_view::npos) eol = text.size();
      std::string_view value;
      if (header_line_is(text.substr(pos, eol - pos), "content-length", value)) {
        const bool digits = !value.empty() && value.size() <= 19 &&
                            value.find_first_not_of("0123456789") == std::string_view::npos;
        if (!digits || std::stoull(std::string(value)) > limits_.max_body_bytes) too_large_ = true;
      }
      pos = eol + 1;
    }
    return true;
  }

  int sock_;
  SSL* ssl_;
  const ServerLimits& limits_;
  const std::atomic<socket_t>& listener_;
  std::atomic<std::int64_t>& waiting_since_;
  SteadyClock::time_point began_{};
  SteadyClock::time_point deadline_{};
  char buffer_[16 * 1024];
  std::size_t begin_ = 0, end_ = 0;
  bool header_done_ = false;
  std::string header_;
  std::uint32_t tail_ = 0;
  std::size_t body_consumed_ = 0, body_budget_ = 0;
  bool too_large_ = false;
};

}  // namespace

BoundedServer::BoundedServer(ServerLimits limits, SSL_CTX* tls) : limits_(limits), tls_(tls) {
  if (tls_) SSL_CTX_up_ref(tls_);
  const std::size_t cap = std::max<std::size_t>(limits_.max_connections, 1);
  new_task_queue = [cap] { return new ConnectionThreads(cap); };
  set_payload_max_length(limits_.max_body_bytes);
  // SO_REUSEADDR lets a restarted daemon bind while old connections linger in TIME_WAIT;
  // SO_REUSEPORT (cpp-httplib's default) would let a second process share the port.
  set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  // Small responses on kept-alive connections: without this, Nagle and delayed ACKs cost ~40 ms each.
  set_tcp_nodelay(true);
}

BoundedServer::~BoundedServer() {
  stop_serving();
  if (tls_) SSL_CTX_free(tls_);
}

Result<int> BoundedServer::bind_port(const std::string& host, int port) {
  errno = 0;
  if (port == 0) {
    port = bind_to_any_port(host);
    if (port < 0) return make_error("cannot bind " + host + ":0: " + fs::errno_text(errno));
  } else if (!bind_to_port(host, port)) {
    const int err = errno;
    return make_error("cannot bind " + host + ":" + std::to_string(port) + ": " +
                      (err ? fs::errno_text(err) : std::string("address unavailable")) +
                      (err == EADDRINUSE ? "; is another gpuslice-node running?" : ""));
  }
  // cpp-httplib listens with a backlog of 5: a burst of connections would have its SYNs dropped and
  // retried a second later. listen() again only raises the backlog of the bound socket.
  ::listen(svr_sock_, SOMAXCONN);
  return port;
}

void BoundedServer::start_serving() {
  std::atomic<bool> returned{false};
  thread_ = std::thread([this, &returned] {
    listen_after_bind();
    returned = true;
  });
  // stop() is a no-op until the accept loop runs, so do not hand back a server that cannot be stopped.
  while (!is_running() && !returned) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void BoundedServer::stop_serving() {
  if (!thread_.joinable()) return;
  stop();
  thread_.join();
}

bool BoundedServer::enter(const std::string& client) {
  std::lock_guard lock(mutex_);
  std::size_t& count = per_client_[client];
  if (count >= limits_.max_connections_per_client) {
    if (count == 0) per_client_.erase(client);
    return false;
  }
  ++count;
  return true;
}

void BoundedServer::leave(const std::string& client) {
  std::lock_guard lock(mutex_);
  auto it = per_client_.find(client);
  if (it != per_client_.end() && --it->second == 0) per_client_.erase(it);
}

bool BoundedServer::make_room(const std::string& client) {
  std::lock_guard lock(mutex_);
  // A client at its own cap would be refused anyway: it must not cost anyone else a connection.
  if (auto it = per_client_.find(client);
      it != per_client_.end() && it->second >= limits_.max_connections_per_client)
    return false;
  // Evicted connections still hold a thread until they notice; this bounds the threads to twice the cap.
  if (evicted_ >= limits_.max_connections) return false;
  Served* victim = nullptr;
  std::int64_t oldest = 0;
  for (auto& [sock, served] : served_) {
    const std::int64_t since = served.waiting_since->load();
    if (served.evicted || since == 0) continue;
    if (!victim || since < oldest) {
      victim = &served;
      oldest = since;
    }
  }
  if (!victim) return false;  // every connection is being answered: nothing to take back
  victim->evicted = true;
  ++evicted_;
  // Its thread wakes from poll at once and leaves; it closes the descriptor after unregistering.
  ::shutdown(victim->sock, SHUT_RDWR);
  GS_LOG(Debug, "connection cap reached: closed the connection that waited longest on its client");
  return true;
}

void BoundedServer::register_connection(socket_t sock, std::atomic<std::int64_t>& waiting_since) {
  std::lock_guard lock(mutex_);
  served_[sock] = Served{sock, &waiting_since, false};
}

void BoundedServer::unregister_connection(socket_t sock) {
  std::lock_guard lock(mutex_);
  auto it = served_.find(sock);
  if (it == served_.end()) return;
  if (it->second.evicted) --evicted_;
  served_.erase(it);
}

bool BoundedServer::process_and_close_socket(socket_t sock) {
  int port = 0;
  const std::string client = peer_of(sock, port);
  if (t_over_capacity) {
    // At the cap: a newcomer (a health check, say) gets the place of a connection that waits on
    // its client, so slow clients from many addresses cannot hold every place.
    t_admitted = make_room(client);
    if (t_admitted) return true;  // served next, on a thread of its own
    refuse(sock, tls_ == nullptr);
    return false;
  }
  if (!enter(client)) {
    GS_LOG(Debug, "refused a connection from %s: %zu open from that address", client.c_str(),
           limits_.max_connections_per_client);
    refuse(sock, tls_ == nullptr);
    return false;
  }
  serve_connection(sock);
  leave(client);
  return true;
}

void BoundedServer::serve_connection(socket_t sock) {
  int flags = fcntl(sock, F_GETFL);
  if (flags < 0 || fcntl(sock, F_SETFL, flags | O_NONBLOCK) != 0) {
    ::close(sock);
    return;
  }
  SSL* ssl = nullptr;
  if (tls_) {
    ssl = SSL_new(tls_);
    if (!ssl || SSL_set_fd(ssl, sock) != 1) {
      SSL_free(ssl);
      ::close(sock);
      return;
    }
    SSL_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  }
  std::atomic<std::int64_t> waiting_since{0};
  register_connection(sock, waiting_since);
  {
    Connection conn(sock, ssl, limits_, svr_sock_, waiting_since);
    bool open = !ssl || conn.handshake();
    for (std::size_t served = 0; open && served < limits_.max_requests_per_connection; ++served) {
      if (svr_sock_ == INVALID_SOCKET || !conn.wait_for_request(limits_.idle_timeout)) break;
      conn.begin_request();
      bool closed = false;
      const bool last = served + 1 == limits_.max_requests_per_connection;
      open = process_request(conn, last, closed, nullptr) && !closed && !conn.too_large();
    }
  }
  // From here on make_room cannot reach the descriptor, so closing it cannot let it shut down a reused one.
  unregister_connection(sock);
  if (ssl) {
    SSL_shutdown(ssl);
    SSL_free(ssl);
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
}

}  // namespace gpuslice::node
