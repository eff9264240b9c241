// Cost of the priority gate's look at the other containers on the node channel: a full scan of the
// directory (a listing per writer, an open per record) against a re-read of the record files the
// last scan kept open (one pread each), for 2 and 8 containers. The gate scans every
// absent_refresh_ns and re-reads every refresh_ns while a higher priority is alive; the ratio of the
// two is what the cached re-read saves on each refresh. BM_TickBesideAToucher: a reader scanning
// every 10 ms while a tenant creates and removes a file in the node directory all the time, beside
// 0 or 100,000 junk files: cpu_time / real_time is the share of its time the reader spends looking
// (issue 45: a changed directory is listed at most once a second, so the flood adds at most ~5%).
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "shared_state/node_channel.h"

namespace {

using gpuslice::Priority;
using gpuslice::shm::NodeChannel;
using gpuslice::shm::PeerState;

constexpr char kGpu[] = "GPU-6d6f636b-0000-4000-8000-000000000000";
constexpr std::uint64_t kStaleNs = 3'600'000'000'000;  // records published once stay fresh

// A node directory with `peers` high-priority containers (one writer each) and the reader's own record.
struct Node {
  explicit Node(int peers) {
    char pattern[] = "/tmp/gpuslice-channel-bench-XXXXXX";
    if (mkdtemp(pattern) == nullptr) std::abort();
    dir = pattern;
    for (int i = 0; i < peers; ++i) {
      auto opened =
          NodeChannel::open(dir, kGpu, 100 + static_cast<std::uint64_t>(i), "w" + std::to_string(i));
      if (!opened) std::abort();
      writers.push_back(std::move(opened).value());
    }
    auto own = NodeChannel::open(dir, kGpu, 1, "reader");
    if (!own) std::abort();
    reader = std::move(own).value();
  }
  ~Node() {
    writers.clear();
    reader.reset();
    std::filesystem::remove_all(dir);
  }
  void publish_all() {
    PeerState state;
    state.priority = Priority::High;
    for (auto& w : writers) w->publish(state);
  }
  std::string dir;
  std::vector<std::unique_ptr<NodeChannel>> writers;
  std::unique_ptr<NodeChannel> reader;
};

void BM_FullScan(benchmark::State& state) {
  Node node(static_cast<int>(state.range(0)));
  node.publish_all();
  PeerState peers[64];
  for (auto _ : state) {
    const std::size_t n = node.reader->scan_peers(peers, 64, gpuslice::monotonic_ns(), kStaleNs);
    if (n != static_cast<std::size_t>(state.range(0))) state.SkipWithError("a record was not read");
    benchmark::DoNotOptimize(peers);
  }
}

void BM_KnownReread(benchmark::State& state) {
  Node node(static_cast<int>(state.range(0)));
  node.publish_all();
  PeerState peers[64];
  node.reader->scan_peers(peers, 64, gpuslice::monotonic_ns(), kStaleNs);
  for (auto _ : state) {
    const std::size_t n =
        node.reader->read_known_peers(peers, 64, gpuslice::monotonic_ns(), kStaleNs, Priority::Low);
    if (n != static_cast<std::size_t>(state.range(0))) state.SkipWithError("a record was not re-read");
    benchmark::DoNotOptimize(peers);
  }
}

void BM_TickBesideAToucher(benchmark::State& state) {
  Node node(2);
  node.publish_all();
  for (std::int64_t i = 0; i < state.range(0); ++i) {
    const int fd = ::open((node.dir + "/junk-" + std::to_string(i)).c_str(), O_CREAT | O_WRONLY, 0644);
    if (fd < 0) std::abort();
    ::close(fd);
  }
  std::jthread toucher([&](const std::stop_token& stop) {
    const std::string touched = node.dir + "/touched";
    while (!stop.stop_requested()) {
      const int fd = ::open(touched.c_str(), O_CREAT | O_WRONLY, 0644);
      if (fd >= 0) ::close(fd);
      ::unlink(touched.c_str());
    }
  });
  PeerState peers[64];
  const std::uint64_t before = node.reader->entries_listed();
  for (auto _ : state) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the reader's tick
    const std::size_t n = node.reader->scan_peers(peers, 64, gpuslice::monotonic_ns(), kStaleNs);
    if (n != 2) state.SkipWithError("a record was not read");
    benchmark::DoNotOptimize(peers);
  }
  state.counters["entries_listed"] = static_cast<double>(node.reader->entries_listed() - before);
}

BENCHMARK(BM_FullScan)->Arg(2)->Arg(8);
BENCHMARK(BM_TickBesideAToucher)
    ->Arg(0)
    ->Arg(100'000)
    ->Iterations(300)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_KnownReread)->Arg(2)->Arg(8);

}  // namespace

BENCHMARK_MAIN();
