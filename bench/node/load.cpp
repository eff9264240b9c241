// Open-loop load on gpuslice-node's /metrics and /api/v1/status over loopback.
//
// By default it builds a host root with --containers containers (real ledgers with a live process:
// this one), starts the daemon binary on it (--fake-gpus, no device plugin) and drives it at --rate
// requests/s for --duration, alternating the two endpoints. With --target HOST:PORT it loads a
// daemon that is already running instead. Requests are sent on a fixed schedule from several
// keep-alive connections; latency is measured from the scheduled send time, so a stalled server
// shows up as latency rather than as a lower rate.
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "node/host/host_layout.h"
#include "node/host/limits_file.h"
#include "shared_state/ledger.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  double rate = 1000;
  double duration_s = 30;
  int connections = 8;
  int containers = 20;
  std::string target;  // HOST:PORT of a running daemon
  std::string daemon;  // path of gpuslice-node
  std::string token = "bench-token";
  int port = 19410;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(
      stderr,
      "%s\nusage: node_load_bench [--rate N] [--duration SECONDS] [--connections N] [--containers N]\n"
      "                       [--daemon PATH | --target HOST:PORT --token TOKEN] [--port N]\n",
      why);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  std::filesystem::path self = std::filesystem::canonical("/proc/self/exe");
  o.daemon = (self.parent_path() / "gpuslice-node").string();
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value for " + a).c_str());
      return argv[++i];
    };
    if (a == "--rate")
      o.rate = std::stod(value());
    else if (a == "--duration")
      o.duration_s = std::stod(value());
    else if (a == "--connections")
      o.connections = std::stoi(value());
    else if (a == "--containers")
      o.containers = std::stoi(value());
    else if (a == "--target")
      o.target = value();
    else if (a == "--daemon")
      o.daemon = value();
    else if (a == "--token")
      o.token = value();
    else if (a == "--port")
      o.port = std::stoi(value());
    else
      usage(("unknown argument " + a).c_str());
  }
  if (o.rate <= 0 || o.duration_s <= 0 || o.connections <= 0)
    usage("rate, duration and connections must be > 0");
  return o;
}

// Containers with live ledgers, so every scrape renders real per-container series.
std::vector<std::unique_ptr<gpuslice::shm::Ledger>> make_containers(const gpuslice::node::HostLayout& layout,
                                                                    int n) {
  std::vector<std::unique_ptr<gpuslice::shm::Ledger>> ledgers;
  for (int i = 0; i < n; ++i) {
    std::string id = "bench-" + std::to_string(i);
    gpuslice::node::Limits limits;
    limits.memory = "8Gi";
    limits.compute = "50";
    auto written =
        gpuslice::node::write_file_atomically(layout.limits_file(id), gpuslice::node::render_limits(limits));
    auto ledger = gpuslice::shm::Ledger::open(layout.state_file(id), gpuslice::shm::Ledger::Mode::Process);
    if (!written || !ledger)
      usage(("cannot create container state: " + (ledger ? written.error() : ledger.error())).c_str());
    for (int d = 0; d < 2; ++d) {
      char uuid[64];
      std::snprintf(uuid, sizeof uuid, "GPU-fa4e0000-0000-4000-8000-%012d", d);
      auto dev = (*ledger)->attach_device(uuid, d, 16ULL << 30, 8ULL << 30, 50);
      if (!dev) usage(dev.error().c_str());
    }
    if (!(*ledger)->register_process()) usage("register_process failed");
    (*ledger)->try_reserve(0, (1ULL << 30) + static_cast<std::uint64_t>(i) * (1ULL << 20));
    ledgers.push_back(std::move(ledger).value());
  }
  return ledgers;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  std::string host = "127.0.0.1";
  int port = o.port;
  pid_t daemon = -1;
  std::string root;
  std::vector<std::unique_ptr<gpuslice::shm::Ledger>> ledgers;

  if (!o.target.empty()) {
    auto colon = o.target.rfind(':');
    if (colon == std::string::npos) usage("--target is HOST:PORT");
    host = o.target.substr(0, colon);
    port = std::stoi(o.target.substr(colon + 1));
  } else {
    char dir[] = "/tmp/gsn-bench-XXXXXX";
    if (!mkdtemp(dir)) usage("mkdtemp failed");
    root = dir;
    gpuslice::node::HostLayout layout(root);
    ledgers = make_containers(layout, o.containers);
    std::string listen = "--listen=127.0.0.1:" + std::to_string(port);
    std::string root_flag = "--root=" + root;
    daemon = fork();
    if (daemon == 0) {
      setenv("GPUSLICE_NODE_TOKEN", o.token.c_str(), 1);
      execl(o.daemon.c_str(), o.daemon.c_str(), "serve", root_flag.c_str(), listen.c_str(),
            "--fake-gpus=2x16Gi", "--no-device-plugin", "--kubelet-pods-dir=", "--log-level=warn",
            static_cast<char*>(nullptr));
      std::perror(("exec " + o.daemon).c_str());
      _exit(127);
    }
    httplib::Client probe(host, port);
    bool up = false;
    for (int i = 0; i < 200 && !up; ++i) {
      auto res = probe.Get("/healthz");
      up = res && res->status == 200;
      if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    if (!up) {
      kill(daemon, SIGTERM);
      usage("the daemon did not come up");
    }
  }

  const httplib::Headers auth = {{"Authorization", "Bearer " + o.token}};
  const auto total = static_cast<long>(o.rate * o.duration_s);
  const auto interval = std::chrono::duration<double>(1.0 / o.rate);
  std::atomic<long> next{0};
  std::atomic<long> errors{0};
  std::mutex latencies_mutex;
  std::vector<double> latencies_ms;
  latencies_ms.reserve(static_cast<std::size_t>(total));
  std::string first_error;
  const auto start = Clock::now() + std::chrono::milliseconds(100);

  std::vector<std::thread> workers;
  for (int w = 0; w < o.connections; ++w) {
    workers.emplace_back([&] {
      httplib::Client client(host, port);
      client.set_keep_alive(true);
      client.set_tcp_nodelay(true);
      std::vector<double> mine;
      for (long i = next++; i < total; i = next++) {
        auto scheduled =
            start + std::chrono::duration_cast<Clock::duration>(interval * static_cast<double>(i));
        std::this_thread::sleep_until(scheduled);
        auto res = (i % 2 == 0) ? client.Get("/metrics") : client.Get("/api/v1/status", auth);
        auto done = Clock::now();
        mine.push_back(std::chrono::duration<double, std::milli>(done - scheduled).count());
        if (!res || res->status != 200 || res->body.empty()) {
          if (errors++ == 0) {
            std::lock_guard lock(latencies_mutex);
            first_error = res ? "HTTP " + std::to_string(res->status) : httplib::to_string(res.error());
          }
        }
      }
      std::lock_guard lock(latencies_mutex);
      latencies_ms.insert(latencies_ms.end(), mine.begin(), mine.end());
    });
  }
  for (auto& t : workers) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();

  if (daemon > 0) {
    kill(daemon, SIGTERM);
    int status = 0;
    waitpid(daemon, &status, 0);
  }
  ledgers.clear();
  if (!root.empty()) std::filesystem::remove_all(root);

  std::sort(latencies_ms.begin(), latencies_ms.end());
  auto pct = [&](double p) {
    if (latencies_ms.empty()) return 0.0;
    auto at = static_cast<std::size_t>(p / 100.0 * static_cast<double>(latencies_ms.size() - 1));
    return latencies_ms[at];
  };
  std::printf("requests   %ld in %.1f s (%.0f req/s achieved, %.0f req/s asked), %d connections\n",
              static_cast<long>(latencies_ms.size()), elapsed,
              static_cast<double>(latencies_ms.size()) / elapsed, o.rate, o.connections);
  std::printf("endpoints  /metrics and /api/v1/status alternately, %d containers x 2 GPUs\n", o.containers);
  std::printf("errors     %ld%s%s\n", errors.load(),
              first_error.empty() ? "" : " (first: ", first_error.empty() ? "" : (first_error + ")").c_str());
  std::printf("latency ms p50 %.2f  p90 %.2f  p99 %.2f  p99.9 %.2f  max %.2f\n", pct(50), pct(90), pct(99),
              pct(99.9), latencies_ms.empty() ? 0.0 : latencies_ms.back());
  return errors.load() == 0 ? 0 : 1;
}
