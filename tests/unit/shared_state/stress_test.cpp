// The container-wide invariant under fire: 8 processes x 8 threads allocate and free at random
// against one quota while the test SIGKILLs random processes and starts replacements. A sampler
// checks that the ledger never exceeds the quota; at the end it must equal, byte for byte, what
// the survivors report they hold.
//
// Workers are fresh processes (this binary re-executed with --stress-worker, see test_main.cpp),
// so no thread state is inherited through fork. Duration: GPUSLICE_STRESS_SECONDS, default 20.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "shared_state/ledger.h"
#include "test_util.h"

extern char** environ;

namespace gpuslice::shm {

constexpr char kStressUuid[] = "GPU-57e55000-0000-0000-0000-000000000001";
constexpr std::uint64_t kStressQuota = 64ULL << 20;
constexpr int kWorkerThreads = 8;

// Worker process: allocates and frees until told to stop on stdin, then writes
// "<live bytes> <granted> <refused>\n" to stdout and waits for stdin to close before exiting
// without returning anything, so the parent can compare the ledger with what it holds.
int run_stress_worker(const char* path, unsigned seed) {
  auto opened = Ledger::open(path, Ledger::Mode::Process);
  if (!opened.ok()) {
    std::fprintf(stderr, "worker: %s\n", opened.error().c_str());
    return 3;
  }
  Ledger& ledger = *opened.value();
  auto dev = ledger.attach_device(kStressUuid, 0, 80ULL << 30, kStressQuota, 0);
  if (!dev.ok() || !ledger.register_process().ok()) return 4;
  std::atomic<bool> stop{false};
  std::vector<std::uint64_t> live(kWorkerThreads, 0), granted(kWorkerThreads, 0), refused(kWorkerThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kWorkerThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(seed * 131u + static_cast<unsigned>(t));
      std::vector<std::uint64_t> held;
      while (!stop.load(std::memory_order_relaxed)) {
        if (held.empty() || (rng() % 100 < 55 && held.size() < 32)) {
          std::uint64_t size = 1 + rng() % (kStressQuota / 16);
          if (ledger.try_reserve(dev.value(), size)) {
            held.push_back(size);
            ++granted[t];
          } else {
            ++refused[t];
          }
        } else {
          std::size_t k = rng() % held.size();
          ledger.release(dev.value(), held[k]);
          held[k] = held.back();
          held.pop_back();
        }
      }
      for (std::uint64_t h : held) live[t] += h;
    });
  }
  char c;
  while (read(STDIN_FILENO, &c, 1) < 0) {
  }
  stop.store(true);
  for (auto& t : threads) t.join();
  std::uint64_t total_live = 0, total_granted = 0, total_refused = 0;
  for (int t = 0; t < kWorkerThreads; ++t) {
    total_live += live[t];
    total_granted += granted[t];
    total_refused += refused[t];
  }
  std::printf("%llu %llu %llu\n", static_cast<unsigned long long>(total_live),
              static_cast<unsigned long long>(total_granted), static_cast<unsigned long long>(total_refused));
  std::fflush(stdout);
  while (read(STDIN_FILENO, &c, 1) > 0) {
  }
  _exit(0);  // no destructor: the ledger keeps the bytes until the parent has compared
}

namespace {

struct Worker {
  pid_t pid = -1;
  int to_child = -1;
  int from_child = -1;
};

std::string self_executable() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

Worker spawn_worker(const std::string& exe, const std::string& state, unsigned seed) {
  int down[2], up[2];
  Worker w;
  if (pipe2(down, O_CLOEXEC) != 0 || pipe2(up, O_CLOEXEC) != 0) return w;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, down[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, up[1], STDOUT_FILENO);
  std::string seed_text = std::to_string(seed);
  std::vector<char*> argv = {const_cast<char*>(exe.c_str()), const_cast<char*>("--stress-worker"),
                             const_cast<char*>(state.c_str()), seed_text.data(), nullptr};
  pid_t pid = -1;
  if (posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv.data(), environ) == 0) w.pid = pid;
  posix_spawn_file_actions_destroy(&actions);
  close(down[0]);
  close(up[1]);
  w.to_child = down[1];
  w.from_child = up[0];
  return w;
}

void close_worker_pipes(Worker& w) {
  if (w.to_child >= 0) close(w.to_child);
  if (w.from_child >= 0) close(w.from_child);
  w.to_child = w.from_child = -1;
}

double stress_seconds() {
  const char* text = std::getenv("GPUSLICE_STRESS_SECONDS");
  if (text == nullptr || *text == '\0') return 20.0;
  double value = std::atof(text);
  return value > 0 ? value : 20.0;
}

TEST(LedgerStress, RandomAllocFreeAndSigkillNeverExceedQuotaAndEndsExact) {
  testing::TempDir dir;
  std::string state = dir.file("state");
  std::string exe = self_executable();
  ASSERT_FALSE(exe.empty());
  auto opened = Ledger::open(state, Ledger::Mode::Process);
  ASSERT_TRUE(opened.ok()) << opened.error();
  std::unique_ptr<Ledger> observer =
      std::move(opened).value();  // never registers: an observer with create rights
  int dev = observer->attach_device(kStressUuid, 0, 80ULL << 30, kStressQuota, 0).value();

  constexpr int kWorkers = 8;
  unsigned seed = 1;
  std::vector<Worker> workers;
  for (int i = 0; i < kWorkers; ++i) {
    workers.push_back(spawn_worker(exe, state, seed++));
    ASSERT_GT(workers.back().pid, 0);
  }

  std::atomic<bool> sampling{true};
  std::atomic<std::uint64_t> samples{0}, violations{0}, worst{0};
  std::thread sampler([&] {
    while (sampling.load()) {
      std::uint64_t used = observer->used(dev);
      if (used > kStressQuota) violations.fetch_add(1);
      if (used > worst.load()) worst.store(used);
      samples.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });

  std::mt19937 rng(12345);
  int kills = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(stress_seconds());
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng() % 180));
    Worker& victim = workers[rng() % kWorkers];
    kill(victim.pid, SIGKILL);
    int status = 0;
    waitpid(victim.pid, &status, 0);
    EXPECT_TRUE(WIFSIGNALED(status)) << "worker failed on its own: status " << status;
    close_worker_pipes(victim);
    ++kills;
    victim = spawn_worker(exe, state, seed++);
    ASSERT_GT(victim.pid, 0);
  }

  // Stop the survivors and collect what each holds.
  for (Worker& w : workers) ASSERT_EQ(write(w.to_child, "s", 1), 1);
  std::map<pid_t, std::uint64_t> live_by_pid;
  std::uint64_t survivors_live = 0, granted = 0, refused = 0;
  for (Worker& w : workers) {
    std::string line;
    char c;
    while (read(w.from_child, &c, 1) == 1 && c != '\n') line += c;
    unsigned long long live = 0, g = 0, r = 0;
    ASSERT_EQ(std::sscanf(line.c_str(), "%llu %llu %llu", &live, &g, &r), 3)
        << "worker said '" << line << "'";
    live_by_pid[w.pid] = live;
    survivors_live += live;
    granted += g;
    refused += r;
  }
  sampling.store(false);
  sampler.join();

  observer->reap_dead();
  EXPECT_EQ(violations.load(), 0u) << "worst sample " << worst.load() << " > quota " << kStressQuota;
  EXPECT_GT(samples.load(), 0u);
  EXPECT_GT(kills, 0);
  EXPECT_GT(granted, 0u);
  EXPECT_GT(refused, 0u) << "the quota was never contended: the test proved nothing";
  EXPECT_EQ(observer->used(dev), survivors_live);
  Snapshot snap = observer->snapshot();
  EXPECT_EQ(snap.processes.size(), static_cast<std::size_t>(kWorkers));
  for (const ProcessRow& row : snap.processes) {
    ASSERT_EQ(live_by_pid.count(row.pid), 1u) << "unexpected live slot of pid " << row.pid;
    EXPECT_EQ(row.used_by_device[0], live_by_pid[row.pid]) << "pid " << row.pid;
  }

  // Survivors leave without releasing: the ledger must drain to zero through reaping alone.
  for (Worker& w : workers) {
    close_worker_pipes(w);
    int status = 0;
    waitpid(w.pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  observer->reap_dead();
  EXPECT_EQ(observer->used(dev), 0u);
  std::printf("[ stress   ] %d kills, %llu samples, %llu grants, %llu refusals, worst %llu of %llu bytes\n",
              kills, static_cast<unsigned long long>(samples.load()),
              static_cast<unsigned long long>(granted), static_cast<unsigned long long>(refused),
              static_cast<unsigned long long>(worst.load()), static_cast<unsigned long long>(kStressQuota));
}

}  // namespace
}  // namespace gpuslice::shm
