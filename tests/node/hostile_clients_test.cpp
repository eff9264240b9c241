// The daemon's HTTP API and the webhook against clients that try to stop them: slow clients holding
// connections, a huge Content-Length, a second daemon on the same port. Loopback only; every loop is
// bounded in count and time.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "node/admission/webhook_server.h"
#include "node/api/http_api.h"
#include "node/node_view/collector.h"
#include "test_util.h"

namespace gpuslice::node {
namespace {

using Clock = std::chrono::steady_clock;

// A TCP connection to 127.0.0.1:port from `source` (another loopback address stands for another client).
int connect_from(const char* source, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in local{};
  local.sin_family = AF_INET;
  inet_pton(AF_INET, source, &local.sin_addr);
  sockaddr_in remote{};
  remote.sin_family = AF_INET;
  remote.sin_port = htons(static_cast<std::uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &remote.sin_addr);
  timeval tv{3, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&remote), sizeof remote) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void send_text(int fd, const std::string& text) { (void)!::send(fd, text.data(), text.size(), MSG_NOSIGNAL); }

// What the server sends until it closes or 3 s pass.
std::string read_reply(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    if (out.find("\r\n\r\n") != std::string::npos && out.find("}") != std::string::npos) break;
  }
  return out;
}

class HostileClientsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    collector_ = std::make_unique<Collector>(layout_, nullptr, clock_);
    collector_->refresh();
  }

  std::unique_ptr<ApiServer> start_api(ApiOptions options, int& port) {
    options.host = "127.0.0.1";
    options.token = "t0ken";
    auto server = std::make_unique<ApiServer>(options, layout_, *collector_);
    auto started = server->start();
    EXPECT_TRUE(started.ok()) << started.error();
    port = started.ok() ? *started : -1;
    return server;
  }

  test::TempDir dir_;
  HostLayout layout_{dir_ / "root"};
  test::FakeClock clock_;
  std::unique_ptr<Collector> collector_;
};

// Three times as many slow clients as the old worker pool had threads, each sending a request line
// and one header, then nothing: /healthz still answers at once, and the slow ones are dropped when
// their request deadline passes.
TEST_F(HostileClientsTest, SlowClientsCannotStarveHealthz) {
  ApiOptions options;
  options.port = 0;
  options.limits.request_timeout = std::chrono::milliseconds(1500);
  int port = -1;
  auto server = start_api(options, port);
  ASSERT_GT(port, 0);

  std::vector<int> slow;
  for (int i = 0; i < 48; ++i) {
    int fd = connect_from("127.0.0.2", port);
    ASSERT_GE(fd, 0);
    send_text(fd, "GET /healthz HTTP/1.1\r\nHost: x\r\n");
    slow.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let every slow one be accepted

  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(2);
  client.set_read_timeout(2);
  for (int i = 0; i < 5; ++i) {
    auto begin = Clock::now();
    auto res = client.Get("/healthz");
    auto took = Clock::now() - begin;
    ASSERT_TRUE(res) << "healthz got no answer: " << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200);
    // Starved, it would wait for a slow client's 1.5 s deadline; the margin absorbs a loaded CI.
    EXPECT_LT(took, std::chrono::milliseconds(1000));
  }

  // Past the request deadline every slow connection has been closed by the server.
  auto deadline = Clock::now() + std::chrono::seconds(5);
  for (int fd : slow) {
    char byte;
    ssize_t n = -1;
    while (Clock::now() < deadline) {
      n = ::recv(fd, &byte, 1, 0);
      if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) break;
    }
    EXPECT_TRUE(n == 0 || (n > 0) || errno == ECONNRESET) << "a slow client was never dropped";
    ::close(fd);
  }
}

// Slowloris from several addresses: each stays under the per-address cap, together they hold more
// connections than the server serves at once, each having sent part of a request and then nothing.
// /healthz and the API still answer at once: at the cap the connection that has waited longest on
// its client makes room for the newcomer instead of the newcomer being refused.
TEST_F(HostileClientsTest, SlowClientsFromManyAddressesCannotStarveHealthz) {
  ApiOptions options;
  options.port = 0;  // the default caps: 128 connections, 32 per address
  int port = -1;
  auto server = start_api(options, port);
  ASSERT_GT(port, 0);

  std::vector<int> slow;
  for (const char* source : {"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6"}) {
    for (int i = 0; i < 32; ++i) {
      int fd = connect_from(source, port);
      ASSERT_GE(fd, 0) << source;
      send_text(fd, "GET /healthz HTTP/1.1\r\nHost: x\r\n");
      slow.push_back(fd);
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let every slow one be accepted

  for (int i = 0; i < 5; ++i) {
    httplib::Client client("127.0.0.1", port);
    client.set_connection_timeout(2);
    client.set_read_timeout(2);
    auto begin = Clock::now();
    auto res = client.Get("/healthz");
    auto took = Clock::now() - begin;
    ASSERT_TRUE(res) << "healthz got no answer: " << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200) << res->body;
    EXPECT_LT(took, std::chrono::milliseconds(1000));
    auto api = client.Get("/api/v1/status", {{"Authorization", "Bearer t0ken"}});
    ASSERT_TRUE(api) << "the API got no answer: " << httplib::to_string(api.error());
    EXPECT_EQ(api->status, 200) << api->body;
  }
  for (int fd : slow) ::close(fd);
}

TEST_F(HostileClientsTest, SlowClientsCannotStarveTheWebhookHealthz) {
  WebhookServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.tls_cert_file = std::string(GPUSLICE_NODE_FIXTURES) + "/tls/tls.crt";
  options.tls_key_file = std::string(GPUSLICE_NODE_FIXTURES) + "/tls/tls.key";
  options.limits.request_timeout = std::chrono::milliseconds(1500);
  WebhookServer server(options, {});
  auto port = server.start();
  ASSERT_TRUE(port.ok()) << port.error();

  std::vector<int> slow;  // connected, never starting the TLS handshake
  for (int i = 0; i < 24; ++i) {
    int fd = connect_from("127.0.0.2", *port);
    ASSERT_GE(fd, 0);
    slow.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));

  httplib::SSLClient client("127.0.0.1", *port);
  client.enable_server_certificate_verification(false);
  client.set_connection_timeout(2);
  client.set_read_timeout(2);
  auto begin = Clock::now();
  auto res = client.Get("/healthz");
  ASSERT_TRUE(res) << "healthz got no answer: " << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_LT(Clock::now() - begin, std::chrono::milliseconds(1000));
  for (int fd : slow) ::close(fd);
}

TEST_F(HostileClientsTest, HugeContentLengthIsRefusedAtOnce) {
  ApiOptions options;
  options.port = 0;
  int port = -1;
  auto server = start_api(options, port);
  ASSERT_GT(port, 0);

  int fd = connect_from("127.0.0.1", port);
  ASSERT_GE(fd, 0);
  auto begin = Clock::now();
  send_text(fd,
            "PUT /api/v1/containers/c1/limits HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t0ken\r\n"
            "Content-Type: application/json\r\nContent-Length: 107374182400\r\n\r\n{\"memory\":");
  std::string reply = read_reply(fd);
  auto took = Clock::now() - begin;
  ::close(fd);
  EXPECT_EQ(reply.rfind("HTTP/1.1 413", 0), 0u) << reply;
  EXPECT_LT(took, std::chrono::milliseconds(1000));
}

TEST_F(HostileClientsTest, SecondDaemonCannotBindTheSamePort) {
  ApiOptions options;
  options.port = 0;
  int port = -1;
  auto first = start_api(options, port);
  ASSERT_GT(port, 0);

  ApiOptions same;
  same.host = "127.0.0.1";
  same.port = port;
  ApiServer second(same, layout_, *collector_);
  auto bound = second.start();
  ASSERT_FALSE(bound.ok()) << "a second server bound port " << port;
  EXPECT_NE(bound.error().find(":" + std::to_string(port)), std::string::npos) << bound.error();
  EXPECT_NE(bound.error().find("in use"), std::string::npos) << bound.error();
  EXPECT_NE(bound.error().find("(EADDRINUSE)"), std::string::npos) << "errno named as errno_text does";

  // The first one still answers everything.
  httplib::Client client("127.0.0.1", port);
  for (int i = 0; i < 20; ++i) {
    auto res = client.Get("/healthz");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
  }
}

}  // namespace
}  // namespace gpuslice::node
