// End to end: MPS clients configured by the real libgpuslice.so (docs/priority.md#mps-or-time-slices)
// on the simulated driver, which connects to "MPS" when CUDA_MPS_PIPE_DIRECTORY holds a `control`
// entry, writes the MPS variables it read at cuInit to GPUSLICE_MOCK_MPS_REPORT, enforces the
// pinned-memory limit per process, and makes a client wait while <pipe>/mock-server-uid names another
// user (docs/mock-driver.md).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "process.h"

namespace gpuslice::test {
namespace {

constexpr long long kContextBytes = 32LL << 20;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_file(const std::string& path, const std::string& text, mode_t mode = 0644) {
  std::ofstream(path) << text;
  chmod(path.c_str(), mode);
}

class MpsClientE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir("gpuslice-mps-e2e-");
    ASSERT_FALSE(dir_.empty());
    pipe_ = dir_ + "/pipe";
    ASSERT_EQ(mkdir(pipe_.c_str(), 0755), 0);
    write_file(pipe_ + "/control", "");  // a control daemon's socket, as far as the mock looks
    ASSERT_EQ(mkdir((dir_ + "/node").c_str(), 01777), 0);
    chmod((dir_ + "/node").c_str(), 01777);
  }
  void TearDown() override { remove_tree(dir_); }

  Env env(const char* priority = "low") const {
    Env e = mock_container_env(dir_, 2, kContextBytes, GPUSLICE_MOCK_DIR, GPUSLICE_PRELOAD);
    e["CUDA_MPS_PIPE_DIRECTORY"] = pipe_;
    e["GPUSLICE_MOCK_MPS_REPORT"] = report();
    e["GPUSLICE_LOG_LEVEL"] = "info";
    if (priority != nullptr) e["GPUSLICE_PRIORITY"] = priority;
    return e;
  }
  std::string report() const { return dir_ + "/mps-report"; }

  Outcome fill(const Env& e, long long chunk = 64LL << 20) const {
    return run({GPUSLICE_PROBE_APP, "--scenario", "fill", "--chunk", std::to_string(chunk)}, e, 60);
  }

  std::string dir_;
  std::string pipe_;
};

TEST_F(MpsClientE2E, ThePinnedLimitComesFromTheQuotaAndTheTenantsLargerValueIsLowered) {
  Env e = env();
  e["GPUSLICE_MEMORY_LIMIT"] = "0=1Gi,1=512Mi";
  e["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = "0=4G,1=256M";  // larger on 0 (lowered), smaller on 1 (kept)
  e["CUDA_MPS_CLIENT_PRIORITY"] = "0";                    // a low container asking for normal
  const Outcome o = fill(e);
  EXPECT_EQ(o.exit_code, 0) << o.out << o.err;
  const std::string seen = slurp(report());
  EXPECT_NE(seen.find("pinned=0=1024M,1=256M\n"), std::string::npos) << seen;
  EXPECT_NE(seen.find("priority=1\n"), std::string::npos) << seen;
  EXPECT_NE(o.err.find("MPS client (pipe directory"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("own values were lowered"), std::string::npos) << o.err;
  EXPECT_LE(o.num("allocated"), 1LL << 30) << "the books still hold the quota";
}

TEST_F(MpsClientE2E, TheLimitsFileCapsThePinnedLimitAndSetsTheThreadShareBelowHigh) {
  write_file(dir_ + "/limits", "GPUSLICE_MEMORY_LIMIT=768Mi\nGPUSLICE_MPS_LOW_THREADS=40\n");
  Env e = env("normal");
  e["GPUSLICE_MEMORY_LIMIT"] = "2Gi";  // the request above the operator's cap
  e["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = "90";
  e["CUDA_VISIBLE_DEVICES"] = "0,1";  // the client's ordinals (no NVIDIA kernel module to list them here)
  const Outcome o = fill(e);
  EXPECT_EQ(o.exit_code, 0) << o.out << o.err;
  const std::string seen = slurp(report());
  EXPECT_NE(seen.find("pinned=0=768M,1=768M\n"), std::string::npos) << seen;
  EXPECT_NE(seen.find("priority=1\n"), std::string::npos) << "normal runs below MPS's normal\n" << seen;
  EXPECT_NE(seen.find("threads=40\n"), std::string::npos) << seen;
}

// Only a container the operator assigned high keeps MPS's normal client priority, when it asks for
// high or for no level (the assigned level is its default); asking is not enough, nor is the
// assignment when the container asks for less.
TEST_F(MpsClientE2E, OnlyAHighContainerTheOperatorAssignedKeepsTheNormalClientPriority) {
  const Outcome asked = fill(env("high"));
  EXPECT_EQ(asked.exit_code, 0) << asked.err;
  EXPECT_NE(slurp(report()).find("priority=1\n"), std::string::npos) << slurp(report());
  write_file(dir_ + "/node/uid-" + std::to_string(geteuid()) + ".assigned", "priority=high\n");
  const Outcome assigned = fill(env("high"));
  EXPECT_EQ(assigned.exit_code, 0) << assigned.err;
  EXPECT_NE(slurp(report()).find("priority=0\n"), std::string::npos) << slurp(report());
  Env unasked = env(nullptr);
  unasked["GPUSLICE_MEMORY_LIMIT"] =
      "1Gi";  // a managed container (one with no limit and no level passes through)
  const Outcome by_default = fill(unasked);
  EXPECT_EQ(by_default.exit_code, 0) << by_default.err;
  EXPECT_NE(slurp(report()).find("priority=0\n"), std::string::npos) << slurp(report());
  const Outcome asked_less = fill(env("normal"));
  EXPECT_EQ(asked_less.exit_code, 0) << asked_less.err;
  EXPECT_NE(slurp(report()).find("priority=1\n"), std::string::npos) << slurp(report());
}

// Under MPS a higher priority's kernels run beside the lower one's queued work instead of after
// it: the lower one's in-flight bound defaults to 1 ms instead of 2 (its exit line says the bound).
TEST_F(MpsClientE2E, TheInFlightBoundIsTighterUnderMps) {
  const auto bound_line = [&](bool mps) {
    Env e = env("low");
    if (!mps) e.erase("CUDA_MPS_PIPE_DIRECTORY");
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    const long long epoch = static_cast<long long>(now.tv_sec) * 1'000'000'000LL + now.tv_nsec;
    const Outcome o = run({GPUSLICE_PRIORITY_APP, "--epoch-ns", std::to_string(epoch), "--seconds", "0.5",
                           "--kernel-us", "100", "--step", "10"},
                          e, 60);
    EXPECT_EQ(o.exit_code, 0) << o.out << o.err;
    const std::size_t at = o.err.find("in-flight bound ");
    return at == std::string::npos ? std::string("(no exit line)\n") + o.err : o.err.substr(at, 23);
  };
  EXPECT_EQ(bound_line(true), "in-flight bound 1000 us");
  EXPECT_EQ(bound_line(false), "in-flight bound 2000 us");
}

// GPUSLICE_MPS_PRIORITY=server in the lower container's limits file: under MPS its launches are
// never held beside a busy higher container (the server's client priority ranks them); without it
// (the gate, the default) they are. Each process is its own container (its own shared directory).
TEST_F(MpsClientE2E, TheOperatorCanLeaveTheRankingToTheMpsServer) {
  write_file(dir_ + "/node/uid-" + std::to_string(geteuid()) + ".assigned", "priority=high\n");
  const auto launches_held = [&](const char* limits) {
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    const long long epoch =
        static_cast<long long>(now.tv_sec) * 1'000'000'000LL + now.tv_nsec + 1'500'000'000LL;
    Env high = env("high");
    high["GPUSLICE_SHARED_DIR"] = dir_ + "/shared-high";
    Background server({GPUSLICE_PRIORITY_APP, "--epoch-ns", std::to_string(epoch), "--seconds", "1.5",
                       "--kernel-us", "1000", "--step", "5", "--busy-from-ms", "0", "--busy-to-ms", "1500"},
                      high, dir_ + "/server.out");
    Env low = env("low");
    low["GPUSLICE_SHARED_DIR"] = dir_ + "/shared-low";
    low["GPUSLICE_LIMITS_FILE"] = dir_ + "/limits-low";
    write_file(dir_ + "/limits-low", limits);
    const Outcome o = run({GPUSLICE_PRIORITY_APP, "--epoch-ns", std::to_string(epoch), "--seconds", "1.5",
                           "--kernel-us", "200", "--step", "5"},
                          low, 60);
    EXPECT_EQ(server.wait(), 0) << server.output();
    EXPECT_EQ(o.exit_code, 0) << o.out << o.err;
    const std::size_t at = o.err.find(" launches held)");
    const std::size_t open = at == std::string::npos ? at : o.err.rfind('(', at);
    return open == std::string::npos ? -1L : std::stol(o.err.substr(open + 1, at - open - 1));
  };
  EXPECT_GT(launches_held("GPUSLICE_MPS_PRIORITY=gate\n"), 0L) << "the gate holds the lower one";
  EXPECT_EQ(launches_held("GPUSLICE_MPS_PRIORITY=server\n"), 0L) << "the server ranks it: never held";
}

// The simulated MPS server refuses a client's memory past its pinned limit, as the real one does
// (the backstop for what the books cannot see): here without the library, the limit the client set.
TEST_F(MpsClientE2E, TheSimulatedServerEnforcesThePinnedLimit) {
  Env e = mock_container_env(dir_, 2, kContextBytes, GPUSLICE_MOCK_DIR, nullptr);
  e["CUDA_MPS_PIPE_DIRECTORY"] = pipe_;
  e["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = "0=512M";
  const Outcome o = fill(e);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_LE(o.num("allocated") + kContextBytes, 512LL << 20) << o.out;
  EXPECT_GE(o.num("allocated"), 384LL << 20) << o.out;
}

// GPUSLICE_MPS_COMPUTE=threads, the operator's choice in the limits file: the compute limit is the
// client's SM share, and the GPU-time limiter stands aside. The simulated server runs a client's
// kernels on its share of the SMs (each 100/30 times as long), so a device-bound loop does 30% of the
// work it does alone either way; under `time` and without MPS the limiter holds it (its exit line).
TEST_F(MpsClientE2E, UnderThreadsTheComputeLimitIsTheSmShareAndNoTimeLimiterRuns) {
  const std::vector<std::string> loop = {GPUSLICE_PROBE_APP,
                                         "--scenario",
                                         "steps",
                                         "--kernel-us",
                                         "2000",
                                         "--kernels",
                                         "1",
                                         "--host-us",
                                         "0",
                                         "--seconds",
                                         "3",
                                         "--measure-from-ms",
                                         "1000"};
  const auto limited = [&](const char* mode, bool mps) {
    write_file(dir_ + "/limits", std::string("GPUSLICE_MPS_COMPUTE=") + mode + "\n");
    std::remove(report().c_str());
    Env e = env(nullptr);
    e["GPUSLICE_COMPUTE_LIMIT"] = "30";
    e["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = "100";  // the tenant's own: lowered, never kept above
    e["GPUSLICE_MOCK_QUEUE_DEPTH"] = "4";            // what the loop launched in the measured span ran in it
    if (!mps) e.erase("CUDA_MPS_PIPE_DIRECTORY");
    const Outcome o = run(loop, e, 60);
    EXPECT_EQ(o.exit_code, 0) << o.out << o.err;
    return o;
  };
  const Outcome threads = limited("threads", true);
  EXPECT_NE(slurp(report()).find("threads=30\n"), std::string::npos) << slurp(report());
  EXPECT_NE(threads.err.find("compute limit 30% as an SM share"), std::string::npos) << threads.err;
  EXPECT_EQ(threads.err.find("compute limiter, device"), std::string::npos) << "no GPU-time limiter\n"
                                                                            << threads.err;
  EXPECT_NEAR(threads.num("busy_permille"), 300, 30) << "the SM share alone holds it\n" << threads.out;

  const Outcome time = limited("time", true);
  EXPECT_NE(slurp(report()).find("threads=100\n"), std::string::npos) << "the tenant's, untouched\n"
                                                                      << slurp(report());
  EXPECT_NE(time.err.find("compute limit by GPU time (GPUSLICE_MPS_COMPUTE=time)"), std::string::npos)
      << time.err;
  EXPECT_NE(time.err.find("compute limiter, device 0"), std::string::npos) << time.err;

  const Outcome no_mps = limited("threads", false);
  EXPECT_EQ(no_mps.err.find("MPS client"), std::string::npos) << no_mps.err;
  EXPECT_NE(no_mps.err.find("compute limiter, device 0"), std::string::npos) << no_mps.err;
  EXPECT_NEAR(no_mps.num("busy_permille"), 300, 30) << "without MPS the GPU-time limiter holds it\n"
                                                    << no_mps.out;
}

// A limit lowered live below the SM share the process started with: the GPU-time limiter takes over
// and gives it the share of its time that leaves it the new limit (15% of the device: half its time
// on 30% of the SMs).
TEST_F(MpsClientE2E, UnderThreadsALimitLoweredLiveIsHeldByGpuTimeOnTheSmShare) {
  write_file(dir_ + "/limits", "GPUSLICE_MPS_COMPUTE=threads\nGPUSLICE_COMPUTE_LIMIT=30\n");
  Env e = env(nullptr);
  e["GPUSLICE_MOCK_QUEUE_DEPTH"] = "4";
  Background loop({GPUSLICE_PROBE_APP, "--scenario", "steps", "--kernel-us", "2000", "--kernels", "1",
                   "--host-us", "0", "--seconds", "4", "--measure-from-ms", "2000"},
                  e, dir_ + "/loop.txt");
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  write_file(dir_ + "/limits", "GPUSLICE_MPS_COMPUTE=threads\nGPUSLICE_COMPUTE_LIMIT=15\n");
  ASSERT_EQ(loop.wait(), 0) << loop.output();
  Outcome o;
  o.out = loop.output();
  o.values = parse_values(o.out);
  EXPECT_NE(slurp(report()).find("threads=30\n"), std::string::npos) << slurp(report());
  EXPECT_NEAR(o.num("busy_permille"), 150, 25) << o.out;
}

// Another user's MPS server: a process named like the control daemon (its pid in the pipe
// directory) with a child named like a server running as another user id, and the simulated
// driver told to make this user's client wait. Needs root (to run the child as another user).
class OtherUsersServer {
 public:
  explicit OtherUsersServer(const std::string& pipe) {
    int ready[2];
    if (pipe2(ready, O_CLOEXEC) != 0) return;
    control_ = fork();
    if (control_ == 0) {
      // Neither keeps the test's output open (a runner reading it would wait for them).
      const int null = open("/dev/null", O_RDWR);
      dup2(null, 0);
      dup2(null, 1);
      dup2(null, 2);
      prctl(PR_SET_NAME, "nvidia-cuda-mps-control");
      if (fork() == 0) {
        prctl(PR_SET_NAME, "nvidia-cuda-mps-server");
        if (setuid(65534) != 0) _exit(1);
        prctl(PR_SET_PDEATHSIG, SIGKILL);  // after setuid, which clears it: ends with the "daemon"
        if (getppid() == 1) _exit(0);
        pause();
        _exit(0);
      }
      (void)write(ready[1], "x", 1);
      pause();
      _exit(0);
    }
    close(ready[1]);
    char c = 0;
    (void)read(ready[0], &c, 1);
    close(ready[0]);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the server child set its uid
    write_file(pipe + "/nvidia-cuda-mps-control.pid", std::to_string(control_) + "\n");
    write_file(pipe + "/mock-server-uid", "65534\n");
  }
  ~OtherUsersServer() {
    if (control_ <= 0) return;
    kill(control_, SIGKILL);  // its server child follows (parent-death signal)
    waitpid(control_, nullptr, 0);
  }

 private:
  pid_t control_ = -1;
};

TEST_F(MpsClientE2E, AClientOfAnotherUsersServerFailsClearlyOrFallsBackInsteadOfWaitingSilently) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a fake server as another user";
  OtherUsersServer server(pipe_);
  Env e = env();
  e["GPUSLICE_MPS"] = "error";
  const Outcome refused = fill(e);
  EXPECT_NE(refused.err.find("serves user id 65534"), std::string::npos) << refused.out << refused.err;
  EXPECT_FALSE(refused.has("allocated")) << refused.out;
  e["GPUSLICE_MPS"] = "fallback";
  const Outcome fallback = fill(e);
  EXPECT_EQ(fallback.exit_code, 0) << fallback.err;
  EXPECT_GT(fallback.num("allocated"), 0) << "ran without MPS\n" << fallback.out << fallback.err;
  EXPECT_NE(fallback.err.find("running without MPS"), std::string::npos) << fallback.err;
  EXPECT_EQ(slurp(report()), "") << "the driver did not connect to MPS";
  // The default waits as the driver does, saying so at once.
  e.erase("GPUSLICE_MPS");
  std::thread end_of_clients([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    unlink((pipe_ + "/mock-server-uid").c_str());
  });
  const Outcome waited = fill(e);
  end_of_clients.join();
  EXPECT_EQ(waited.exit_code, 0) << waited.err;
  EXPECT_NE(waited.err.find("waits in cuInit until its clients have all ended"), std::string::npos)
      << waited.err;
  EXPECT_GT(waited.num("allocated"), 0) << waited.out;
}

}  // namespace
}  // namespace gpuslice::test
