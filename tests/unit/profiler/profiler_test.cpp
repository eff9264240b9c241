#include "profiler/profiler.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "test_support.h"

namespace gpuslice::profiler {
namespace {

using test::MetricsEntry;
using test::TempDir;
using test::TimelineEntry;

const char* const kNames[] = {"cuInit",      "cuMemAlloc",  "cuMemFree",       "cuLaunchKernel",
                              "cuMemcpyH2D", "cuMemcpyD2H", "cuGetProcAddress"};
constexpr std::size_t kApiCount = sizeof kNames / sizeof kNames[0];
enum Api : std::uint16_t {
  kInit,
  kMemAlloc,
  kMemFree,
  kLaunchKernel,
  kMemcpyH2D,
  kMemcpyD2H,
  kGetProcAddress
};

Options quiet_options(std::size_t ring_events = 65536) {
  Options options;
  options.ring_events = ring_events;
  options.background_flusher = false;
  options.handle_termination_signals = false;
  return options;
}

std::string own_metrics_name(pid_t pid) { return "metrics." + std::to_string(pid) + ".log"; }

class ProfilerTest : public ::testing::Test {
 protected:
  void TearDown() override { stop(); }

  void start_quiet(std::size_t ring_events = 65536) {
    ASSERT_TRUE(start(dir_.path().c_str(), kNames, kApiCount, quiet_options(ring_events)));
  }
  std::string file(const std::string& name) const { return test::read_file(dir_.path() / name); }
  std::vector<MetricsEntry> metrics(const std::string& name = "metrics.log") const {
    return test::parse_metrics(file(name));
  }
  std::vector<TimelineEntry> timeline() const { return test::parse_timeline(file("timeline.log")); }

  TempDir dir_;
};

TEST_F(ProfilerTest, DisabledUntilStartedAndAfterStop) {
  EXPECT_FALSE(g_enabled.load());
  record(kInit, 1, 1);  // before start: nothing, and no crash
  start_quiet();
  EXPECT_TRUE(g_enabled.load());
  EXPECT_TRUE(running());
  EXPECT_FALSE(start(dir_.path().c_str(), kNames, kApiCount, quiet_options())) << "second start must refuse";
  stop();
  EXPECT_FALSE(g_enabled.load());
  EXPECT_FALSE(running());
  stop();  // idempotent
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "metrics.log")) << "nothing was recorded";
  EXPECT_TRUE(timeline().empty());
}

TEST_F(ProfilerTest, RejectsInvalidArguments) {
  EXPECT_FALSE(start(nullptr, kNames, kApiCount));
  EXPECT_FALSE(start("", kNames, kApiCount));
  EXPECT_FALSE(start(dir_.path().c_str(), nullptr, kApiCount));
  EXPECT_FALSE(start(dir_.path().c_str(), kNames, 0));
  EXPECT_FALSE(running());
}

TEST_F(ProfilerTest, WritesExactAlnairFormat) {
  start_quiet();
  record(kInit, 1700000000000000001ULL, 5);
  record(kMemAlloc, 1700000000000000100ULL, 7);
  record(kMemAlloc, 1700000000000000200ULL, 9);
  flush();
  EXPECT_EQ(file("metrics.log"),
            "name:cuInit\ncount:1\nburst:5\n"
            "name:cuMemAlloc\ncount:2\nburst:16\n");
  EXPECT_EQ(file(own_metrics_name(getpid())), file("metrics.log"));
  // Alnair's three fields, then the process and thread of the call.
  const std::string who = " pid:" + std::to_string(getpid()) + " tid:" + std::to_string(syscall(SYS_gettid));
  EXPECT_EQ(file("timeline.log"), "name:cuInit start:1700000000000000001 burst:5" + who +
                                      "\nname:cuMemAlloc start:1700000000000000100 burst:7" + who +
                                      "\nname:cuMemAlloc start:1700000000000000200 burst:9" + who + "\n");
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "profiler.log")) << "nothing was dropped";
}

// Trace viewers draw a track per process and thread: every timeline line says which made the call.
TEST_F(ProfilerTest, TimelineLinesNameTheProcessAndThreadOfEachCall) {
  start_quiet();
  record(kInit, 1, 5);
  long other_tid = 0;
  std::thread([&] {
    other_tid = syscall(SYS_gettid);
    record(kMemAlloc, 2, 7);
  }).join();
  flush();
  const auto lines = timeline();
  ASSERT_EQ(lines.size(), 2u);
  for (const auto& line : lines) EXPECT_EQ(line.pid, static_cast<std::uint64_t>(getpid()));
  const auto tid_of = [&](const char* name) {
    for (const auto& line : lines)
      if (line.name == name) return line.tid;
    return std::uint64_t{0};
  };
  EXPECT_EQ(tid_of("cuInit"), static_cast<std::uint64_t>(syscall(SYS_gettid)));
  EXPECT_EQ(tid_of("cuMemAlloc"), static_cast<std::uint64_t>(other_tid));
}

TEST_F(ProfilerTest, CreatesMissingDirectories) {
  const std::filesystem::path nested = dir_.path() / "a" / "b";
  ASSERT_TRUE(start(nested.c_str(), kNames, kApiCount, quiet_options()));
  record(kMemFree, 10, 20);
  stop();
  EXPECT_EQ(test::read_file(nested / "metrics.log"), "name:cuMemFree\ncount:1\nburst:20\n");
}

TEST_F(ProfilerTest, IgnoresApiIdsOutOfRange) {
  start_quiet();
  record(static_cast<std::uint16_t>(kApiCount), 1, 1);
  record(65535, 1, 1);
  record(kLaunchKernel, 2, 3);
  flush();
  EXPECT_EQ(metrics(), (std::vector<MetricsEntry>{{"cuLaunchKernel", 1, 3}}));
  EXPECT_EQ(timeline().size(), 1u);
}

TEST_F(ProfilerTest, IdsSharingANameReportAsOneApi) {
  // cuMemAlloc and cuMemAlloc_v2 hooks both profile as "cuMemAlloc".
  const char* const names[] = {"cuMemAlloc", "cuInit", "cuMemAlloc", "cuMemFree", "cuMemAlloc"};
  ASSERT_TRUE(start(dir_.path().c_str(), names, 5, quiet_options()));
  record(4, 10, 1);
  record(0, 11, 2);
  record(2, 12, 4);
  record(3, 13, 8);
  flush();
  EXPECT_EQ(metrics(), (std::vector<MetricsEntry>{{"cuMemAlloc", 3, 7}, {"cuMemFree", 1, 8}}));
  EXPECT_EQ(metrics(own_metrics_name(getpid())), metrics());
  EXPECT_EQ(timeline(),
            (std::vector<TimelineEntry>{
                {"cuMemAlloc", 10, 1}, {"cuMemAlloc", 11, 2}, {"cuMemAlloc", 12, 4}, {"cuMemFree", 13, 8}}));
}

TEST_F(ProfilerTest, CountsAndTotalsExactAcrossThreads) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 100000;
  constexpr std::size_t kRing = 1024;
  start_quiet(kRing);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < kPerThread; ++i) {
        record(static_cast<std::uint16_t>((t + i) % kApiCount), 1000 + static_cast<std::uint64_t>(i),
               static_cast<std::uint64_t>((t * 31 + i) % 997));
      }
    });
  }
  for (auto& thread : threads) thread.join();

  std::vector<std::uint64_t> expected_count(kApiCount, 0);
  std::vector<std::uint64_t> expected_total(kApiCount, 0);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPerThread; ++i) {
      const std::size_t api = static_cast<std::size_t>((t + i) % kApiCount);
      ++expected_count[api];
      expected_total[api] += static_cast<std::uint64_t>((t * 31 + i) % 997);
    }
  }
  flush();
  const auto entries = metrics();
  ASSERT_EQ(entries.size(), kApiCount);
  for (std::size_t api = 0; api < kApiCount; ++api) {
    EXPECT_EQ(entries[api].name, kNames[api]);
    EXPECT_EQ(entries[api].count, expected_count[api]) << kNames[api];
    EXPECT_EQ(entries[api].burst, expected_total[api]) << kNames[api];
  }
  // No background drain: each thread kept exactly its first kRing events.
  const std::uint64_t kept = kThreads * kRing;
  EXPECT_EQ(timeline().size(), kept);
  EXPECT_EQ(dropped_events(), std::uint64_t{kThreads} * kPerThread - kept);
  EXPECT_EQ(file("profiler.log"), "pid:" + std::to_string(getpid()) +
                                      " dropped:" + std::to_string(kThreads * kPerThread - kept) + "\n");
}

TEST_F(ProfilerTest, FullRingDropsTimelineEventsButKeepsTotalsExact) {
  start_quiet(16);
  for (std::uint64_t i = 0; i < 100; ++i) record(kLaunchKernel, 5000 + i, 3);
  flush();
  auto lines = timeline();
  ASSERT_EQ(lines.size(), 16u);
  for (std::uint64_t i = 0; i < 16; ++i) EXPECT_EQ(lines[i].start, 5000 + i) << "oldest events are kept";
  EXPECT_EQ(metrics(), (std::vector<MetricsEntry>{{"cuLaunchKernel", 100, 300}}));
  EXPECT_EQ(dropped_events(), 84u);

  // Flushing made room again.
  for (std::uint64_t i = 0; i < 5; ++i) record(kLaunchKernel, 9000 + i, 1);
  flush();
  lines = timeline();
  ASSERT_EQ(lines.size(), 21u);
  EXPECT_EQ(lines[16].start, 9000u);
  EXPECT_EQ(metrics(), (std::vector<MetricsEntry>{{"cuLaunchKernel", 105, 305}}));
  EXPECT_EQ(dropped_events(), 84u);
}

TEST_F(ProfilerTest, RepeatedFlushesAppendTimelineOnceAndRewriteMetrics) {
  start_quiet();
  record(kMemcpyH2D, 1, 10);
  flush();
  flush();  // nothing new: no duplicate lines
  record(kMemcpyD2H, 2, 20);
  flush();
  EXPECT_EQ(timeline(), (std::vector<TimelineEntry>{{"cuMemcpyH2D", 1, 10}, {"cuMemcpyD2H", 2, 20}}));
  EXPECT_EQ(metrics(), (std::vector<MetricsEntry>{{"cuMemcpyH2D", 1, 10}, {"cuMemcpyD2H", 1, 20}}));
}

TEST_F(ProfilerTest, EventsOfExitedThreadsAreFlushedAndTheirTotalsKept) {
  start_quiet();
  std::thread worker([] {
    for (std::uint64_t i = 0; i < 10; ++i) record(kMemAlloc, 100 + i, 2);
  });
  worker.join();
  flush();  // drains the retired ring and frees it
  EXPECT_EQ(timeline().size(), 10u);
  EXPECT_EQ(metrics(), (std::vector<MetricsEntry>{{"cuMemAlloc", 10, 20}}));

  record(kMemAlloc, 200, 5);
  flush();
  EXPECT_EQ(timeline().size(), 11u);
  EXPECT_EQ(metrics(), (std::vector<MetricsEntry>{{"cuMemAlloc", 11, 25}})) << "exited thread's totals stay";
}

TEST_F(ProfilerTest, StopFlushesAndRestartBeginsFreshTotals) {
  start_quiet();
  record(kInit, 1, 1);
  stop();
  EXPECT_EQ(metrics(), (std::vector<MetricsEntry>{{"cuInit", 1, 1}}));

  TempDir second;
  ASSERT_TRUE(start(second.path().c_str(), kNames, kApiCount, quiet_options()));
  record(kMemFree, 2, 2);
  stop();
  EXPECT_EQ(test::parse_metrics(test::read_file(second.path() / "metrics.log")),
            (std::vector<MetricsEntry>{{"cuMemFree", 1, 2}}));
  EXPECT_EQ(metrics(), (std::vector<MetricsEntry>{{"cuInit", 1, 1}})) << "first directory untouched";
}

TEST_F(ProfilerTest, ForkChildDoesNotWriteParentsEvents) {
  start_quiet();
  for (std::uint64_t i = 0; i < 10; ++i) record(kMemAlloc, 1000 + i, 1);  // not flushed before fork
  const pid_t parent = getpid();
  const pid_t child = test::run_in_child([] {
    for (std::uint64_t i = 0; i < 3; ++i) record(kMemFree, 2000 + i, 4);
    std::exit(0);  // the inherited exit handler flushes the child's own events
  });
  ASSERT_GT(child, 0);
  ASSERT_EQ(test::wait_for_exit(child), 0);
  flush();

  std::map<std::string, int> lines_per_api;
  for (const auto& line : timeline()) ++lines_per_api[line.name];
  EXPECT_EQ(lines_per_api, (std::map<std::string, int>{{"cuMemAlloc", 10}, {"cuMemFree", 3}}));
  EXPECT_EQ(metrics(own_metrics_name(parent)), (std::vector<MetricsEntry>{{"cuMemAlloc", 10, 10}}));
  EXPECT_EQ(metrics(own_metrics_name(child)), (std::vector<MetricsEntry>{{"cuMemFree", 3, 12}}));
  EXPECT_EQ(metrics(), (std::vector<MetricsEntry>{{"cuMemAlloc", 10, 10}, {"cuMemFree", 3, 12}}));
}

TEST_F(ProfilerTest, ProcessesSharingADirectoryMergeIntoMetricsLog) {
  // A process of another gpuslice version reporting an API this one does not know.
  {
    std::ofstream other(dir_.path() / "metrics.4194305.log");
    other << "name:cuFutureApi\ncount:2\nburst:30\nname:cuInit\ncount:1\nburst:1\n";
  }
  std::vector<pid_t> children;
  for (int c = 1; c <= 3; ++c) {
    const std::string dir = dir_.path().string();
    children.push_back(test::run_in_child([c, dir] {
      if (!start(dir.c_str(), kNames, kApiCount, quiet_options())) _exit(2);
      for (int i = 0; i < c; ++i) record(kLaunchKernel, static_cast<std::uint64_t>(c * 100 + i), 10);
      stop();
      _exit(0);
    }));
  }
  for (pid_t child : children) ASSERT_EQ(test::wait_for_exit(child), 0);

  EXPECT_EQ(metrics(),
            (std::vector<MetricsEntry>{{"cuInit", 1, 1}, {"cuLaunchKernel", 6, 60}, {"cuFutureApi", 2, 30}}));
  for (std::size_t c = 0; c < children.size(); ++c) {
    const std::uint64_t calls = c + 1;
    EXPECT_EQ(metrics(own_metrics_name(children[c])),
              (std::vector<MetricsEntry>{{"cuLaunchKernel", calls, 10 * calls}}));
  }
  EXPECT_EQ(timeline().size(), 6u);
}

TEST_F(ProfilerTest, FilesAreReplacedAtomically) {
  start_quiet();
  record(kInit, 1, 1);
  record(kMemAlloc, 1, 1);
  record(kMemFree, 1, 1);
  flush();
  std::atomic<bool> done{false};
  std::atomic<int> torn{0};
  std::atomic<int> reads{0};
  const std::filesystem::path path = dir_.path() / "metrics.log";
  std::thread reader([&] {
    while (!done.load()) {
      const auto entries = test::parse_metrics(test::read_file(path), /*report_errors=*/false);
      // Every writer state has the three APIs with equal counts; anything else is a partial file.
      if (entries.size() != 3 || entries[0].count != entries[1].count ||
          entries[1].count != entries[2].count) {
        ++torn;
      }
      ++reads;
    }
  });
  for (int round = 0; round < 100; ++round) {
    record(kInit, 1, 1);
    record(kMemAlloc, 1, 1);
    record(kMemFree, 1, 1);
    flush();
  }
  // The reader must have looked at least once while flushes ran or after them.
  done.store(true);
  reader.join();
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(torn.load(), 0);
  stop();
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir_.path())) {
    names.insert(entry.path().filename().string());
  }
  EXPECT_EQ(names, (std::set<std::string>{"metrics.log", own_metrics_name(getpid()), "timeline.log",
                                          ".metrics.lock"}))
      << "no temporary files are left behind";
}

TEST_F(ProfilerTest, SigtermFlushesThenDiesOfSigterm) {
  const std::string dir = dir_.path().string();
  const pid_t child = test::run_in_child([dir] {
    signal(SIGTERM, SIG_DFL);
    Options options = quiet_options();
    options.handle_termination_signals = true;
    if (!start(dir.c_str(), kNames, kApiCount, options)) _exit(2);
    for (std::uint64_t i = 0; i < 5; ++i) record(kLaunchKernel, 70 + i, 2);
    kill(getpid(), SIGTERM);
    _exit(3);  // not reached when the signal kills us
  });
  ASSERT_GT(child, 0);
  const int status = test::wait_for_status(child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "status " << status;
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_EQ(metrics(), (std::vector<MetricsEntry>{{"cuLaunchKernel", 5, 10}}));
  EXPECT_EQ(timeline().size(), 5u);
}

std::atomic<int> g_app_handler_calls{0};
void app_sigterm_handler(int) { ++g_app_handler_calls; }

TEST_F(ProfilerTest, ApplicationsOwnSigtermHandlerIsLeftAlone) {
  const std::string dir = dir_.path().string();
  const pid_t child = test::run_in_child([dir] {
    signal(SIGTERM, app_sigterm_handler);
    Options options = quiet_options();
    options.handle_termination_signals = true;
    if (!start(dir.c_str(), kNames, kApiCount, options)) _exit(2);
    struct sigaction current {};
    sigaction(SIGTERM, nullptr, &current);
    if (current.sa_handler != app_sigterm_handler) _exit(4);
    kill(getpid(), SIGTERM);
    _exit(g_app_handler_calls.load() == 1 ? 0 : 5);
  });
  ASSERT_EQ(test::wait_for_exit(child), 0);
}

TEST_F(ProfilerTest, ExitFlushesWithoutExplicitStop) {
  const std::string dir = dir_.path().string();
  const pid_t child = test::run_in_child([dir] {
    if (!start(dir.c_str(), kNames, kApiCount, quiet_options())) _exit(2);
    std::thread worker([] { record(kMemcpyD2H, 1, 8); });
    worker.join();
    record(kMemcpyH2D, 2, 9);
    std::exit(0);
  });
  ASSERT_EQ(test::wait_for_exit(child), 0);
  EXPECT_EQ(metrics(), (std::vector<MetricsEntry>{{"cuMemcpyH2D", 1, 9}, {"cuMemcpyD2H", 1, 8}}));
}

#if defined(__SANITIZE_THREAD__)
#define GPUSLICE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define GPUSLICE_TSAN 1
#endif
#endif

TEST_F(ProfilerTest, FlusherDoesNotKeepTheProcessAlive) {
#ifdef GPUSLICE_TSAN
  GTEST_SKIP() << "ThreadSanitizer's own background thread keeps a main-less process alive";
#endif
  const std::string dir = dir_.path().string();
  const pid_t child = test::run_in_child([dir] {
    execl(GPUSLICE_PROFILER_EXIT_HELPER, GPUSLICE_PROFILER_EXIT_HELPER, dir.c_str(), nullptr);
    _exit(127);
  });
  // A hang guard, not a timing assertion: the flusher notices within about a second.
  const int status = test::wait_for_status(child, /*give_up_after_s=*/60);
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(metrics(), (std::vector<MetricsEntry>{{"cuGetProcAddress", 1, 4}}));
}

}  // namespace
}  // namespace gpuslice::profiler
