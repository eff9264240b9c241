#include "cli/node_api_client.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/errno_text.h"
#include "common/safe_file.h"
#include "node/mps/mps_report_json.h"
#include "status/status_json.h"

namespace gpuslice::cli {
namespace {

using nlohmann::json;

std::uint64_t now_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000 + static_cast<std::uint64_t>(ts.tv_nsec) / 1000000;
}

struct Url {
  std::string host, port;
};

Result<Url> parse_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) return make_error("URL '" + url + "' must start with http://");
  std::string rest = url.substr(scheme.size());
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.find('/') != std::string::npos) return make_error("URL '" + url + "' must be http://HOST:PORT");
  Url out;
  std::size_t colon = rest.rfind(':');
  if (!rest.empty() && rest[0] == '[') {  // [::1]:9400
    std::size_t close = rest.find(']');
    if (close == std::string::npos) return make_error("URL '" + url + "' has an unterminated IPv6 address");
    out.host = rest.substr(1, close - 1);
    out.port = close + 1 < rest.size() && rest[close + 1] == ':' ? rest.substr(close + 2) : "80";
  } else {
    out.host = colon == std::string::npos ? rest : rest.substr(0, colon);
    out.port = colon == std::string::npos ? "80" : rest.substr(colon + 1);
  }
  if (out.host.empty() || out.port.empty()) return make_error("URL '" + url + "' has no host or port");
  return out;
}

Result<int> connect_with_deadline(const Url& url, std::uint64_t deadline) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = getaddrinfo(url.host.c_str(), url.port.c_str(), &hints, &found);
  if (rc != 0) return make_error("cannot resolve " + url.host + ": " + gai_strerror(rc));
  std::string last_error = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 || errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      std::uint64_t now = now_ms();
      int waited = now < deadline ? ::poll(&p, 1, static_cast<int>(deadline - now)) : 0;
      int err = 0;
      socklen_t len = sizeof err;
      if (waited == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) {
        freeaddrinfo(found);
        return fd;
      }
      last_error = waited == 0 ? "timed out" : fs::errno_text(err != 0 ? err : errno);
    } else {
      last_error = fs::errno_text(errno);
    }
    ::close(fd);
  }
  freeaddrinfo(found);
  return make_error("cannot connect to " + url.host + ":" + url.port + ": " + last_error);
}

bool send_all(int fd, const std::string& data, std::uint64_t deadline) {
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) return false;
    pollfd p{fd, POLLOUT, 0};
    std::uint64_t now = now_ms();
    if (now >= deadline || ::poll(&p, 1, static_cast<int>(deadline - now)) <= 0) return false;
  }
  return true;
}

Result<std::string> decode_chunked(std::string_view body) {
  std::string out;
  std::size_t pos = 0;
  for (;;) {
    std::size_t line_end = body.find("\r\n", pos);
    if (line_end == std::string_view::npos) return make_error("truncated chunked response");
    std::string size_text(body.substr(pos, line_end - pos));
    std::size_t size = 0;
    try {
      size = std::stoul(size_text, nullptr, 16);
    } catch (...) {
      return make_error("malformed chunk size");
    }
    pos = line_end + 2;
    if (size == 0) return out;
    if (body.size() - pos < size) return make_error("truncated chunk");
    out.append(body.substr(pos, size));
    pos += size + 2;
  }
}

}  // namespace

Result<std::string> http_get(const std::string& url_text, const std::string& path, const std::string& token,
                             int connect_timeout_ms, bool* unreachable) {
  if (unreachable != nullptr) *unreachable = false;
  auto url = parse_url(url_text);
  if (!url) return make_error(url.error());
  const std::uint64_t start = now_ms();
  const std::uint64_t deadline = start + kApiTimeoutMs;
  auto fd = connect_with_deadline(
      *url, std::min(deadline, start + static_cast<std::uint64_t>(std::max(connect_timeout_ms, 0))));
  if (!fd) {
    if (unreachable != nullptr) *unreachable = true;
    return make_error(fd.error());
  }
  std::string request = "GET " + path + " HTTP/1.1\r\nHost: " + url->host + "\r\nAuthorization: Bearer " +
                        token + "\r\nAccept: application/json\r\nConnection: close\r\n\r\n";
  if (!send_all(*fd, request, deadline)) {
    ::close(*fd);
    return make_error("cannot send the request to " + url_text);
  }
  std::string response;
  char buffer[65536];
  for (;;) {
    ssize_t n = ::recv(*fd, buffer, sizeof buffer, 0);
    if (n > 0) {
      if (response.size() + static_cast<std::size_t>(n) > kMaxApiResponseBytes) {
        ::close(*fd);
        return make_error("the response of " + url_text + " is larger than " +
                          std::to_string(kMaxApiResponseBytes) + " bytes");
      }
      response.append(buffer, static_cast<std::size_t>(n));
      continue;
    }
    if (n == 0) break;
    if (errno == EINTR) continue;
    if (errno != EAGAIN) {
      ::close(*fd);
      return make_error("cannot read from " + url_text + ": " + fs::errno_text(errno));
    }
    pollfd p{*fd, POLLIN, 0};
    std::uint64_t now = now_ms();
    if (now >= deadline || ::poll(&p, 1, static_cast<int>(deadline - now)) <= 0) {
      ::close(*fd);
      return make_error(url_text + " did not answer within " + std::to_string(kApiTimeoutMs / 1000) + " s");
    }
  }
  ::close(*fd);
  std::size_t head_end = response.find("\r\n\r\n");
  if (head_end == std::string::npos || response.rfind("HTTP/1.", 0) != 0) {
    return make_error(url_text + " did not answer with HTTP");
  }
  std::string head = response.substr(0, head_end);
  std::string body = response.substr(head_end + 4);
  int status = std::atoi(head.c_str() + 9);
  std::string lower;
  for (char c : head) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.find("\r\ntransfer-encoding: chunked") != std::string::npos) {
    auto decoded = decode_chunked(body);
    if (!decoded) return make_error(url_text + ": " + decoded.error());
    body = std::move(decoded).value();
  }
  if (status != 200) {
    std::string message = body.substr(0, 300);
    try {
      auto doc = json::parse(body);
      if (doc.is_object() && doc.contains("error") && doc["error"].is_string()) message = doc["error"];
    } catch (const json::exception&) {
    }
    return make_error(url_text + path + " answered " + std::to_string(status) + ": " + message);
  }
  return body;
}

Result<StatusView> parse_node_status(const std::string& body) {
  json doc;
  try {
    doc = json::parse(body, [](int depth, json::parse_event_t, json&) {
      if (depth > kMaxApiJsonDepth) throw std::runtime_error("JSON nested deeper than 64 levels");
      return true;
    });
  } catch (const std::exception& e) {
    return make_error(std::string("the daemon's status is not valid JSON: ") + e.what());
  }
  if (!doc.is_object()) return make_error("the daemon's status is not a JSON object");
  StatusView view;
  if (doc.contains("gpus") && doc["gpus"].is_array()) {
    for (const json& g : doc["gpus"]) {
      if (!g.is_object()) continue;
      GpuSummary gpu;
      if (g.contains("uuid") && g["uuid"].is_string()) gpu.uuid = g["uuid"];
      if (g.contains("name") && g["name"].is_string()) gpu.name = g["name"];
      if (g.contains("index") && g["index"].is_number_unsigned()) gpu.index = g["index"].get<unsigned>();
      if (g.contains("memory_total_bytes") && g["memory_total_bytes"].is_number_unsigned()) {
        gpu.memory_total_bytes = g["memory_total_bytes"];
      }
      view.gpus.push_back(std::move(gpu));
    }
  }
  if (auto it = doc.find("mps"); it != doc.end() && !it->is_null()) {
    auto report = node::mps::report_from_json(*it);
    if (!report) return make_error("the daemon's status: " + report.error());
    view.mps = std::move(report).value();
  }
  if (auto it = doc.find("dra"); it != doc.end() && !it->is_null()) {
    auto dra = dra_from_json(*it);
    if (!dra) return make_error("the daemon's status: " + dra.error());
    view.dra = std::move(dra).value();
  }
  if (!doc.contains("containers") || !doc["containers"].is_array()) {
    return make_error("the daemon's status has no 'containers' array");
  }
  for (const json& c : doc["containers"]) {
    auto parsed = status::container_from_json(c);
    if (!parsed) return make_error("the daemon's status: " + parsed.error());
    // The daemon relays what a tenant wrote; an older one does not check the UUIDs.
    status::ContainerStatus container = std::move(parsed).value();
    status::reject_bad_uuids(container);
    view.containers.push_back(std::move(container));
  }
  return view;
}

StatusView read_node_api(const NodeApi& api, int connect_timeout_ms, bool* unreachable) {
  if (unreachable != nullptr) *unreachable = false;
  StatusView view;
  auto token_text = fs::read_small_file(api.token_file, 4096);
  if (!token_text) {
    view.error = "cannot read the API token: " + token_text.error();
    return view;
  }
  std::string token = token_text->substr(0, token_text->find('\n'));
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
  if (token.empty()) {
    view.error = "the token file " + api.token_file + " is empty";
    return view;
  }
  auto body = http_get(api.url, "/api/v1/status", token, connect_timeout_ms, unreachable);
  if (!body) {
    view.error = body.error();
    return view;
  }
  auto parsed = parse_node_status(*body);
  if (!parsed) {
    view.error = parsed.error();
    return view;
  }
  return std::move(parsed).value();
}

}  // namespace gpuslice::cli
