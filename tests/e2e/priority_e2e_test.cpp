// End to end: two containers (their own shared dirs, one node dir) on one simulated GPU, the real
// libgpuslice.so under LD_PRELOAD. A low-priority trainer is held back while a high-priority
// container submits, and runs freely while it idles; without priorities both share the device.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/priority.h"
#include "process.h"
#include "shared_state/peer_record.h"

namespace gpuslice::test {
namespace {

constexpr long kBucketMs = 50;  // priority_app's histogram
constexpr long kSeconds = 4;
constexpr long kBusyFromMs = 1200;
constexpr long kBusyToMs = 2000;

long long monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1'000'000'000LL + ts.tv_nsec;
}

std::vector<long> buckets_of(const Outcome& o) {
  std::vector<long> out;
  std::stringstream text(o.values.count("buckets") ? o.values.at("buckets") : "");
  std::string item;
  while (std::getline(text, item, ',')) out.push_back(std::atol(item.c_str()));
  return out;
}

// Kernels completed per 50 ms over [from_ms, to_ms).
double rate(const std::vector<long>& buckets, long from_ms, long to_ms) {
  long sum = 0;
  long n = 0;
  for (long b = from_ms / kBucketMs; b < to_ms / kBucketMs && b < static_cast<long>(buckets.size());
       ++b, ++n) {
    sum += buckets[static_cast<std::size_t>(b)];
  }
  return n > 0 ? static_cast<double>(sum) / static_cast<double>(n) : 0.0;
}

// A low-priority trainer's gate statistics (from its exit log line) and histogram.
struct BoundedTrainer {
  unsigned long long drains = 0;
  unsigned long long waits = 0;
  unsigned long long rereads = 0;  // of the higher records: nonzero only while one was seen
  unsigned long long kernels_costed = 0;
  unsigned long long long_kernels = 0;  // launched alone (GPUSLICE_PRIORITY_LONG_KERNEL=alone)
  std::vector<long> buckets;
  std::string err;
};

class PriorityE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir("gpuslice-prio-e2e-");
    ASSERT_FALSE(dir_.empty());
    // The operator lets this user's containers (writer uid-<euid>) run up to high.
    ASSERT_EQ(mkdir((dir_ + "/node").c_str(), 01777), 0);
    ASSERT_EQ(chmod((dir_ + "/node").c_str(), 01777), 0);
    FILE* assigned = std::fopen((dir_ + "/node/uid-" + std::to_string(geteuid()) + ".assigned").c_str(), "w");
    ASSERT_NE(assigned, nullptr);
    std::fputs("priority=high\n", assigned);
    std::fclose(assigned);
  }
  void TearDown() override { remove_tree(dir_); }

  Env container_env(const std::string& name, const char* priority) const {
    Env env = node_container_env(dir_, name, GPUSLICE_MOCK_DIR, GPUSLICE_PRELOAD);
    if (priority != nullptr) env["GPUSLICE_PRIORITY"] = priority;
    if (auto writer = writer_of_.find(name); writer != writer_of_.end())
      env["GPUSLICE_NODE_WRITER"] = writer->second;
    return env;
  }

  // Kubernetes' layout of one container on the node channel, as the device plugin makes it for a
  // vram allocation and the daemon then assigns it: its own writer directory (01777) and
  // <writer>.assigned beside it in the daemon's format (assignment_file.h).
  void kubernetes_writer(const std::string& name, const std::string& writer, const char* assigned_level) {
    const std::string path = dir_ + "/node/" + writer;
    ASSERT_EQ(mkdir(path.c_str(), 01777), 0);
    ASSERT_EQ(chmod(path.c_str(), 01777), 0);
    FILE* assigned = std::fopen((path + ".assigned").c_str(), "w");
    ASSERT_NE(assigned, nullptr);
    std::fprintf(assigned, "# allocation gpuslice.io/vram 0123456789abcdef\npriority=%s\n", assigned_level);
    std::fclose(assigned);
    writer_of_[name] = writer;
  }
  std::map<std::string, std::string> writer_of_;  // container name -> GPUSLICE_NODE_WRITER

  // Runs the trainer (priority `low`) and the server (priority `high`, busy in
  // [kBusyFromMs, kBusyToMs)) together; returns the trainer's histogram.
  std::vector<long> run_pair(const char* low, const char* high) {
    const long long epoch = monotonic_ns() + 1'500'000'000LL;  // both started and attached by then
    auto argv = [&](bool server) {
      std::vector<std::string> a{GPUSLICE_PRIORITY_APP, "--epoch-ns", std::to_string(epoch), "--seconds",
                                 std::to_string(kSeconds)};
      if (server) {
        a.insert(a.end(), {"--kernel-us", "1000", "--step", "5", "--busy-from-ms",
                           std::to_string(kBusyFromMs), "--busy-to-ms", std::to_string(kBusyToMs)});
      } else {
        // Steps of 1 ms, below the 2 ms in-flight bound: the trainer's own synchronisations keep it
        // bounded, so the comparison is not about the cost of drains on a loaded CI machine.
        a.insert(a.end(), {"--kernel-us", "200", "--step", "5"});
      }
      return a;
    };
    Background server(argv(true), container_env("server", high), dir_ + "/server.out");
    const Outcome trainer = run(argv(false), container_env("trainer", low), 60);
    EXPECT_EQ(server.wait(), 0) << server.output();
    EXPECT_EQ(trainer.exit_code, 0) << trainer.out << trainer.err;
    return buckets_of(trainer);
  }

  // The trainer beside a high-priority container that never works after its first kernel: 100
  // kernels of 200 us between synchronisations (20 ms, ten times the in-flight bound), so only
  // the bound acts. `extra_args` go to the trainer's priority_app, `extra_env` to its environment.
  BoundedTrainer trainer_beside_idle_high(const std::vector<std::string>& extra_args, const Env& extra_env) {
    const long long epoch = monotonic_ns() + 1'500'000'000LL;
    const std::string seconds = std::to_string(kSeconds);
    Background idle(
        {GPUSLICE_PRIORITY_APP, "--epoch-ns", std::to_string(epoch), "--seconds", seconds, "--kernel-us",
         "1000", "--step", "5", "--busy-from-ms", seconds + "000", "--busy-to-ms", seconds + "000"},
        container_env("server", "high"), dir_ + "/server.out");
    Env env = container_env("trainer", "low");
    env["GPUSLICE_LOG_LEVEL"] = "info";
    for (const auto& [name, value] : extra_env) env[name] = value;
    std::vector<std::string> argv{GPUSLICE_PRIORITY_APP,
                                  "--epoch-ns",
                                  std::to_string(epoch),
                                  "--seconds",
                                  seconds,
                                  "--kernel-us",
                                  "200",
                                  "--step",
                                  "100"};
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    const Outcome trainer = run(argv, env, 60);
    EXPECT_EQ(idle.wait(), 0) << idle.output();
    BoundedTrainer out;
    out.err = trainer.err;
    EXPECT_EQ(trainer.exit_code, 0) << trainer.out << trainer.err;
    const std::size_t at = trainer.err.find("priority gate, device 0:");
    const std::size_t held = trainer.err.find("launches held), ", at == std::string::npos ? 0 : at);
    EXPECT_TRUE(at != std::string::npos && held != std::string::npos) << trainer.err;
    if (at == std::string::npos || held == std::string::npos) return out;
    unsigned long long slices = 0;
    unsigned long long scans = 0;
    EXPECT_EQ(
        std::sscanf(
            trainer.err.c_str() + held,
            "launches held), %llu drains, %llu event waits, %llu floor slices, %llu scans, %llu re-reads, "
            "%llu kernels costed, %llu long kernels alone",
            &out.drains, &out.waits, &slices, &scans, &out.rereads, &out.kernels_costed, &out.long_kernels),
        7)
        << trainer.err;
    out.buckets = buckets_of(trainer);
    return out;
  }

  // The priorities published in the node directory's records (one per container and GPU).
  std::vector<unsigned> published_priorities() const {
    std::vector<unsigned> out;
    const std::string node = dir_ + "/node";
    DIR* writers = opendir(node.c_str());
    if (writers == nullptr) return out;
    while (dirent* w = readdir(writers)) {
      if (w->d_name[0] == '.') continue;
      const std::string writer = node + "/" + w->d_name;
      DIR* records = opendir(writer.c_str());
      if (records == nullptr) continue;
      while (dirent* r = readdir(records)) {
        if (r->d_name[0] == '.') continue;
        shm::detail::PeerRecord record{};
        const int fd = open((writer + "/" + r->d_name).c_str(), O_RDONLY | O_NOFOLLOW);
        if (fd < 0) continue;
        if (pread(fd, &record, sizeof record, 0) == static_cast<ssize_t>(sizeof record))
          out.push_back(record.priority);
        close(fd);
      }
      closedir(records);
    }
    closedir(writers);
    return out;
  }

  std::string dir_;
};

TEST_F(PriorityE2E, LowPriorityIsHeldWhileHighPrioritySubmitsAndRunsFreelyWhenItIdles) {
  const std::vector<long> b = run_pair("low", "high");
  const double alone = rate(b, 200, kBusyFromMs - 100);
  const double during = rate(b, kBusyFromMs + 50, kBusyToMs - 50);
  const double after = rate(b, kBusyToMs + 100, kSeconds * 1000 - 100);
  EXPECT_GT(alone, 100) << "200 us kernels: about 250 per 50 ms when alone";
  EXPECT_LT(during, 0.05 * alone) << "held back while the high-priority container submits";
  EXPECT_GT(after, 0.8 * alone) << "unthrottled again when it idles";
  std::string all;
  for (const long n : b) all += std::to_string(n) + " ";
  std::printf("trainer kernels per 50 ms: %s\n", all.c_str());
}

// Beside a high-priority container that is alive but never works, a trainer that synchronises only
// every 20 ms is bounded by events through the real driver calls (the simulated driver's cuCtxGetId and
// events): its exit statistics show event waits and no drain, and it keeps running.
TEST_F(PriorityE2E, BesideAnIdleHighContainerTheBoundWaitsForEventsInsteadOfDraining) {
  const BoundedTrainer trainer = trainer_beside_idle_high({}, {});
  EXPECT_GT(trainer.waits, 100U) << trainer.err;
  EXPECT_EQ(trainer.drains, 0U) << "one stream, one thread: every step waits for an event\n" << trainer.err;
  EXPECT_GT(rate(trainer.buckets, 200, kSeconds * 1000 - 100), 100)
      << "200 us kernels: about 250 per 50 ms when unbounded";
  // The launch hooks name the kernel (function and grid) to the gate, which learns its cost; with
  // GPUSLICE_PRIORITY_COST=average the bound counts launches and learns none.
  EXPECT_GE(trainer.kernels_costed, 1U) << trainer.err;
  const BoundedTrainer counting = trainer_beside_idle_high({}, {{"GPUSLICE_PRIORITY_COST", "average"}});
  EXPECT_EQ(counting.kernels_costed, 0U) << counting.err;
  EXPECT_EQ(counting.drains, 0U) << counting.err;
}

// Kernels of 1.5 ms, over half the 2 ms bound: with GPUSLICE_PRIORITY_LONG_KERNEL=alone each one, once
// its cost is learnt, waits for the queue before it to run (the exit statistics count them); by
// default they queue behind the window before them, as every kernel does.
TEST_F(PriorityE2E, WithLongKernelsAloneAKernelOverHalfTheBoundWaitsForAnEmptyQueue) {
  const BoundedTrainer alone =
      trainer_beside_idle_high({"--kernel-us", "1500"}, {{"GPUSLICE_PRIORITY_LONG_KERNEL", "alone"}});
  EXPECT_GT(alone.long_kernels, 50U) << alone.err;
  EXPECT_EQ(alone.drains, 0U) << alone.err;
  const BoundedTrainer queued = trainer_beside_idle_high({"--kernel-us", "1500"}, {});
  EXPECT_EQ(queued.long_kernels, 0U) << queued.err;
  EXPECT_GT(queued.waits, 50U) << queued.err;
}

// A program built for per-thread default streams launches through the _ptsz entry points on stream
// 0: its thread's own stream, which the gate's events and capture queries must name as such. The
// events then go to that stream; and while it is being captured into a graph the gate leaves it
// alone (an event or a synchronisation there would change the capture).
TEST_F(PriorityE2E, PerThreadStreamLaunchesAreBoundOnTheirOwnStreamAndLeftAloneWhileCaptured) {
  const BoundedTrainer plain = trainer_beside_idle_high({"--ptsz", "1"}, {});
  EXPECT_GT(plain.waits, 100U) << plain.err;
  EXPECT_EQ(plain.drains, 0U) << plain.err;
  const BoundedTrainer captured =
      trainer_beside_idle_high({"--ptsz", "1"}, {{"GPUSLICE_MOCK_CAPTURING", "per-thread"}});
  EXPECT_GT(captured.rereads, 0U) << "the high-priority container was seen\n" << captured.err;
  EXPECT_EQ(captured.waits, 0U) << "no event on a stream being captured\n" << captured.err;
  EXPECT_EQ(captured.drains, 0U) << "no synchronisation either\n" << captured.err;
}

// PyTorch's backward pass launches from its autograd thread on the stream the forward pass used:
// two threads on one stream are one queue, bound by events with no drain (before, any window of two
// threads drained). On their per-thread default streams they are two queues: there it drains.
TEST_F(PriorityE2E, TwoThreadsOnOneStreamAreBoundByEventsAndOnTheirOwnDefaultStreamsByDrains) {
  const BoundedTrainer shared = trainer_beside_idle_high({"--threads", "2"}, {});
  EXPECT_GT(shared.waits, 100U) << shared.err;
  EXPECT_EQ(shared.drains, 0U) << "the legacy stream from two threads is one stream\n" << shared.err;
  const BoundedTrainer own = trainer_beside_idle_high({"--threads", "2", "--ptsz", "1"}, {});
  EXPECT_GT(own.drains, 10U) << "each thread's own stream: an event would cover one of them\n" << own.err;
}

// On Kubernetes: two vram-only containers (no `cores`), each with the writer directory and the
// assignment the device plugin now makes for every vram allocation. The server's pod is of an
// allowed namespace, so the daemon assigned it high: the low trainer is held while it submits.
TEST_F(PriorityE2E, OnKubernetesAVramOnlyServerAssignedHighHoldsTheTrainer) {
  kubernetes_writer("server", "alloc-00000000000000a1", "high");
  kubernetes_writer("trainer", "alloc-00000000000000b2", "normal");
  const std::vector<long> b = run_pair("low", "high");
  const double alone = rate(b, 200, kBusyFromMs - 100);
  const double during = rate(b, kBusyFromMs + 50, kBusyToMs - 50);
  EXPECT_GT(alone, 100);
  EXPECT_LT(during, 0.05 * alone) << "held back while the high-priority server submits";
}

// ...and a pod that asks for high (its annotation or GPUSLICE_PRIORITY, past the webhook) outside
// the operator's namespaces and classes is assigned normal by the daemon: it holds nobody.
TEST_F(PriorityE2E, OnKubernetesAServerThatAsksForHighButIsAssignedNormalHoldsNobody) {
  kubernetes_writer("server", "alloc-00000000000000a1", "normal");
  kubernetes_writer("trainer", "alloc-00000000000000b2", "normal");
  const std::vector<long> b = run_pair("normal", "high");
  const double alone = rate(b, 200, kBusyFromMs - 100);
  const double during = rate(b, kBusyFromMs + 50, kBusyToMs - 50);
  EXPECT_GT(during, 0.1 * alone) << "a level above the assignment is not believed";
}

// A host-bound high-priority server (10 kernels of 20 us, 200 us of host work after each, then a
// synchronisation) keeps the device busy about a tenth of its requests. Its gate measures that
// share while the trainer holds for it and publishes it; a trainer that opts in with
// GPUSLICE_PRIORITY_LIGHT_SHARE=50 then keeps running beside it, one without it is held.
struct LightRun {
  std::vector<long> buckets;
  unsigned server_share = 0;  // permille, from the server's exit line
  std::string server_err;
};

TEST_F(PriorityE2E, ATrainerThatOptsInKeepsRunningBesideAHostBoundServerWhoseShareIsMeasuredLight) {
  // A container's own light share counts only as far as the operator allows (docs/priority.md).
  FILE* assigned = std::fopen((dir_ + "/node/uid-" + std::to_string(geteuid()) + ".assigned").c_str(), "w");
  ASSERT_NE(assigned, nullptr);
  std::fputs("priority=high\nlight-share=50\n", assigned);
  std::fclose(assigned);
  auto pair = [&](bool light) {
    const long long epoch = monotonic_ns() + 1'500'000'000LL;
    const std::string seconds = std::to_string(kSeconds);
    Env trainer_env = container_env("trainer", "low");
    if (light) trainer_env["GPUSLICE_PRIORITY_LIGHT_SHARE"] = "50";
    Background trainer({GPUSLICE_PRIORITY_APP, "--epoch-ns", std::to_string(epoch), "--seconds", seconds,
                        "--kernel-us", "200", "--step", "5"},
                       trainer_env, dir_ + "/trainer.out");
    Env server_env = container_env("server", "high");
    server_env["GPUSLICE_LOG_LEVEL"] = "info";
    const Outcome server = run({GPUSLICE_PRIORITY_APP, "--epoch-ns", std::to_string(epoch), "--seconds",
                                seconds, "--kernel-us", "20", "--step", "10", "--host-us", "200",
                                "--busy-from-ms", std::to_string(kBusyFromMs), "--busy-to-ms", "3500"},
                               server_env, 60);
    EXPECT_EQ(trainer.wait(), 0) << trainer.output();
    EXPECT_EQ(server.exit_code, 0) << server.out << server.err;
    LightRun run;
    Outcome trainer_out;
    trainer_out.values = parse_values(trainer.output());
    run.buckets = buckets_of(trainer_out);
    run.server_err = server.err;
    const std::string key = "long kernels alone, device share ";
    const std::size_t at = server.err.find(key);
    EXPECT_NE(at, std::string::npos) << server.err;
    if (at != std::string::npos)
      run.server_share = static_cast<unsigned>(std::atoi(server.err.c_str() + at + key.size()));
    return run;
  };
  const LightRun light = pair(true);
  const double alone = rate(light.buckets, 200, kBusyFromMs - 100);
  const double beside = rate(light.buckets, kBusyFromMs + 300, 3400);
  EXPECT_GT(alone, 100) << "200 us kernels: about 250 per 50 ms when alone";
  EXPECT_GT(light.server_share, 0U) << light.server_err;
  EXPECT_LT(light.server_share, 500U) << light.server_err;
  EXPECT_GT(beside, 0.5 * alone) << "light: only the in-flight bound beside it";
  const LightRun held = pair(false);
  EXPECT_LT(rate(held.buckets, kBusyFromMs + 300, 3400), 0.2 * rate(held.buckets, 200, kBusyFromMs - 100))
      << "without the option the server holds it through its requests";
  std::printf("server share %u permille; trainer beside it / alone: %.2f (held: %.2f)\n", light.server_share,
              beside / alone,
              rate(held.buckets, kBusyFromMs + 300, 3400) / rate(held.buckets, 200, kBusyFromMs - 100));
}

// The control: the same pair without priorities time-slices the device, so the check above fails.
TEST_F(PriorityE2E, WithoutPrioritiesTheTrainerKeepsRunningBesideTheServer) {
  const std::vector<long> b = run_pair(nullptr, nullptr);
  const double alone = rate(b, 200, kBusyFromMs - 100);
  const double during = rate(b, kBusyFromMs + 50, kBusyToMs - 50);
  EXPECT_GT(during, 0.1 * alone) << "the simulated GPU serves both queues in turn";
}

// A trainer started with no priority (a memory limit only, so it has a state file) is not held;
// `gpuslice set --priority low` from another process makes it publish a low record and be held
// while the high-priority server submits.
TEST_F(PriorityE2E, SetPriorityFromAnotherProcessChangesThePublishedRecordAndTheGateLive) {
  const long long epoch = monotonic_ns() + 1'500'000'000LL;
  auto args = [&](bool server) {
    std::vector<std::string> a{GPUSLICE_PRIORITY_APP, "--epoch-ns", std::to_string(epoch), "--seconds",
                               std::to_string(kSeconds)};
    if (server) {
      a.insert(a.end(), {"--kernel-us", "1000", "--step", "5", "--busy-from-ms", std::to_string(kBusyFromMs),
                         "--busy-to-ms", std::to_string(kBusyToMs)});
    } else {
      a.insert(a.end(), {"--kernel-us", "200", "--step", "5"});
    }
    return a;
  };
  writer_of_["trainer"] = "ctr-trainer";  // a writer the operator assigned nothing: it asks first
  Env trainer_env = container_env("trainer", nullptr);
  trainer_env["GPUSLICE_MEMORY_LIMIT"] = "1Gi";
  Background server(args(true), container_env("server", "high"), dir_ + "/server.out");
  Background trainer(args(false), trainer_env, dir_ + "/trainer.out");
  auto sleep_until_ms = [&](long ms) {
    const long long wait = epoch + ms * 1'000'000LL - monotonic_ns();
    if (wait > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(wait));
  };
  sleep_until_ms(300);
  const std::vector<unsigned> before = published_priorities();
  EXPECT_EQ(before, std::vector<unsigned>{priority_value(Priority::High)})
      << "only the server publishes: the trainer has no priority yet";
  Env cli_env;
  cli_env["PATH"] = "/usr/bin:/bin";
  const Outcome set =
      run({GPUSLICE_CLI, "set", "--shared-dir", dir_ + "/trainer", "--priority", "low"}, cli_env, 30);
  EXPECT_EQ(set.exit_code, 0) << set.out << set.err;
  EXPECT_NE(set.out.find("priority not set -> low"), std::string::npos) << set.out;
  sleep_until_ms(900);
  std::vector<unsigned> after = published_priorities();
  std::sort(after.begin(), after.end());
  EXPECT_EQ(after, (std::vector<unsigned>{priority_value(Priority::Low), priority_value(Priority::High)}))
      << "the trainer's gate publishes its live level";
  EXPECT_EQ(server.wait(), 0) << server.output();
  EXPECT_EQ(trainer.wait(), 0) << trainer.output();
  const std::vector<long> b = buckets_of(Outcome{0, trainer.output(), "", parse_values(trainer.output())});
  const double alone = rate(b, 200, kBusyFromMs - 100);
  const double during = rate(b, kBusyFromMs + 50, kBusyToMs - 50);
  EXPECT_GT(alone, 100);
  EXPECT_LT(during, 0.05 * alone) << "held back once its priority is low";
  const Outcome status =
      run({GPUSLICE_CLI, "status", "--shared-dir", dir_ + "/trainer", "--json"}, cli_env, 30);
  EXPECT_NE(status.out.find("\"priority\":\"low\""), std::string::npos) << status.out;
}

}  // namespace
}  // namespace gpuslice::test
