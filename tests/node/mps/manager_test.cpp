// The MPS manager against the fake nvidia-cuda-mps-control: start, crash and restart, refusals,
// a clean stop, adoption after a manager restart.
#include "node/mps/manager.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>

#include "node/mps/mps_report_json.h"
#include "test_util.h"

namespace gpuslice::node::mps {
namespace {

using namespace std::chrono_literals;
using test::TempDir;
using test::wait_until;

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

// Knobs of the fake daemon, set for one test and cleared after it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) { ::setenv(name, value.c_str(), 1); }
  ~ScopedEnv() { ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

class MpsManagerTest : public ::testing::Test {
 protected:
  ManagerOptions options() {
    ManagerOptions o;
    o.binary = GPUSLICE_FAKE_MPS_CONTROL;
    o.paths.root = dir_ / "mps";
    o.foreign_pipe_dirs = {dir_ / "nvidia-mps"};
    o.start_timeout = 3s;
    o.command_timeout = 2s;
    o.check_interval = 50ms;
    o.backoff_initial = 50ms;
    o.backoff_max = 400ms;
    o.recheck_refused = 100ms;
    o.stop_timeout = 2s;
    return o;
  }
  // Ticks until the state is `state` (the manager's own pace; not a timing assertion).
  static bool tick_until(MpsManager& m, MpsState state, std::chrono::milliseconds timeout = 10s) {
    return wait_until(
        [&] {
          m.tick();
          return m.report().state == state;
        },
        timeout);
  }
  // A control daemon started by hand, as an operator would, in `pipe_dir`.
  int start_foreign(const std::string& pipe_dir) {
    ::mkdir(pipe_dir.c_str(), 0755);
    ControlEnv env{GPUSLICE_FAKE_MPS_CONTROL, pipe_dir, pipe_dir};
    auto started = start_daemon(env, 3s);
    EXPECT_TRUE(started) << started.error();
    foreign_.push_back(env);
    return live_control_pid(pipe_dir).value_or(0);
  }
  void TearDown() override {
    for (const auto& env : foreign_) (void)send_command(env, "quit", 2s);
    // A test that failed half-way may leave its daemon: it ends with the test.
    for (const std::string& dir : {dir_ / "mps/pipe", dir_ / "nvidia-mps"})
      if (auto pid = live_control_pid(dir)) ::kill(*pid, SIGKILL);
  }

  TempDir dir_;
  std::vector<ControlEnv> foreign_;
};

TEST_F(MpsManagerTest, StartsTheControlDaemonWithPipeAndLogDirectoriesUnderItsRoot) {
  MpsManager m(options());
  m.tick();
  MpsReport r = m.report();
  ASSERT_EQ(r.state, MpsState::Running) << r.reason;
  EXPECT_GT(r.control_pid, 0);
  EXPECT_TRUE(process_alive(r.control_pid));
  EXPECT_EQ(r.pipe_dir, dir_ / "mps/pipe");
  EXPECT_EQ(live_control_pid(r.pipe_dir), r.control_pid);
  EXPECT_TRUE(exists(dir_ / "mps/pipe/control"));
  EXPECT_TRUE(exists(dir_ / "mps/log/control.log"));
  struct stat st {};
  ASSERT_EQ(::stat((dir_ / "mps").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  auto file = read_state_file(dir_ / "mps/state.json");
  ASSERT_TRUE(file) << file.error();
  EXPECT_EQ(file->state, MpsState::Running);
  EXPECT_EQ(file->control_pid, r.control_pid);
  m.stop();
}

TEST_F(MpsManagerTest, ReportsTheServersTheDaemonRuns) {
  MpsManager m(options());
  m.tick();
  ASSERT_EQ(m.report().state, MpsState::Running);
  ControlEnv env{GPUSLICE_FAKE_MPS_CONTROL, dir_ / "mps/pipe", dir_ / "mps/log"};
  ASSERT_TRUE(send_command(env, "start_server -uid " + std::to_string(::getuid()), 2s));
  ASSERT_TRUE(wait_until([&] {
    m.tick();
    return m.report().server_pids.size() == 1;
  }));
  const int server = m.report().server_pids.front();
  EXPECT_TRUE(process_alive(server));
  m.stop();
  EXPECT_FALSE(process_alive(server));
}

TEST_F(MpsManagerTest, RestartsADaemonThatWasKilledAndCountsIt) {
  MpsManager m(options());
  m.tick();
  const int first = m.report().control_pid;
  ASSERT_GT(first, 0);
  ::kill(first, SIGKILL);
  ASSERT_TRUE(wait_until([&] { return !process_alive(first); }));
  m.tick();
  MpsReport r = m.report();
  EXPECT_EQ(r.state, MpsState::Restarting);
  EXPECT_EQ(r.restarts, 1u);
  EXPECT_NE(r.reason.find("ended"), std::string::npos) << r.reason;
  EXPECT_FALSE(exists(dir_ / "mps/pipe/control"))
      << "a dead daemon's socket is cleared before the next start";
  ASSERT_TRUE(tick_until(m, MpsState::Running));
  EXPECT_NE(m.report().control_pid, first);
  EXPECT_TRUE(process_alive(m.report().control_pid));
  EXPECT_EQ(m.report().restarts, 1u);
  m.stop();
}

TEST_F(MpsManagerTest, ADaemonThatCrashesOnceRunsAgainAfterOneRestart) {
  ScopedEnv crash("FAKE_MPS_CRASH_AFTER_MS", "100");
  const std::string once = dir_ / "crash-once";
  test::write_file(once, "");
  ScopedEnv crash_once("FAKE_MPS_CRASH_ONCE", once);
  MpsManager m(options());
  m.tick();
  ASSERT_EQ(m.report().state, MpsState::Running);
  ASSERT_TRUE(wait_until([&] {
    m.tick();
    return m.report().restarts == 1 && m.report().state == MpsState::Running;
  }));
  EXPECT_FALSE(exists(once));
  std::this_thread::sleep_for(300ms);
  m.tick();
  EXPECT_EQ(m.report().state, MpsState::Running);
  EXPECT_EQ(m.report().restarts, 1u);
  m.stop();
}

TEST_F(MpsManagerTest, WaitsItsBackoffBeforeEachRestartAndDoublesIt) {
  std::uint64_t now = 1'000'000'000;
  MpsManager m(options(), [&now] { return now; });
  m.tick();
  ASSERT_EQ(m.report().state, MpsState::Running);
  auto kill_daemon = [&] {
    const int pid = m.report().control_pid;
    ::kill(pid, SIGKILL);
    ASSERT_TRUE(wait_until([&] { return !process_alive(pid); }));
    m.tick();
    ASSERT_EQ(m.report().state, MpsState::Restarting);
  };
  kill_daemon();
  now += 49'000'000;  // backoff 50 ms
  m.tick();
  EXPECT_EQ(m.report().state, MpsState::Restarting);
  now += 1'000'000;
  m.tick();
  ASSERT_EQ(m.report().state, MpsState::Running);
  kill_daemon();
  now += 99'000'000;  // doubled: 100 ms
  m.tick();
  EXPECT_EQ(m.report().state, MpsState::Restarting);
  now += 1'000'000;
  m.tick();
  EXPECT_EQ(m.report().state, MpsState::Running);
  EXPECT_EQ(m.report().restarts, 2u);
  m.stop();
}

TEST_F(MpsManagerTest, AStartTheBinaryRefusesIsReportedWithItsMessageAndTriedAgain) {
  auto refuse = std::make_unique<ScopedEnv>("FAKE_MPS_REFUSE", "no CUDA-capable device is detected");
  MpsManager m(options());
  m.tick();
  MpsReport r = m.report();
  EXPECT_EQ(r.state, MpsState::Restarting);
  EXPECT_NE(r.reason.find("exited with status 1: no CUDA-capable device is detected"), std::string::npos)
      << r.reason;
  refuse.reset();
  ASSERT_TRUE(tick_until(m, MpsState::Running));
  m.stop();
}

TEST_F(MpsManagerTest, ASlowStartIsWaitedFor) {
  ScopedEnv slow("FAKE_MPS_START_DELAY_MS", "400");
  MpsManager m(options());
  m.tick();
  EXPECT_EQ(m.report().state, MpsState::Running) << m.report().reason;
  m.stop();
}

TEST_F(MpsManagerTest, ADaemonThatNeverAnswersIsKilledAndRestarted) {
  auto mute = std::make_unique<ScopedEnv>("FAKE_MPS_MUTE", "1");
  ManagerOptions o = options();
  o.command_timeout = 300ms;
  MpsManager m(o);
  m.tick();
  MpsReport r = m.report();
  EXPECT_EQ(r.state, MpsState::Restarting);
  EXPECT_NE(r.reason.find("does not answer"), std::string::npos) << r.reason;
  mute.reset();
  ASSERT_TRUE(tick_until(m, MpsState::Running));
  m.stop();
}

TEST_F(MpsManagerTest, RefusesWithoutTheBinary) {
  ManagerOptions o = options();
  o.binary = dir_ / "missing/nvidia-cuda-mps-control";
  MpsManager m(o);
  m.tick();
  EXPECT_EQ(m.report().state, MpsState::Refused);
  EXPECT_NE(m.report().reason.find("not an executable file"), std::string::npos) << m.report().reason;

  o.binary = "gpuslice-no-such-mps-control";
  MpsManager by_name(o);
  by_name.tick();
  EXPECT_EQ(by_name.report().state, MpsState::Refused);
  EXPECT_NE(by_name.report().reason.find("not found on PATH"), std::string::npos) << by_name.report().reason;
}

TEST_F(MpsManagerTest, RefusesAPipeDirectoryHeldByADaemonItDidNotStart) {
  ASSERT_TRUE(prepare_dirs(options().paths));
  const int foreign = start_foreign(dir_ / "mps/pipe");
  ASSERT_GT(foreign, 0);
  MpsManager m(options());
  m.tick();
  EXPECT_EQ(m.report().state, MpsState::Refused);
  EXPECT_NE(m.report().reason.find("did not start (pid " + std::to_string(foreign) + ")"), std::string::npos)
      << m.report().reason;
  EXPECT_TRUE(process_alive(foreign)) << "someone else's daemon is left alone";
  m.stop();
  EXPECT_TRUE(process_alive(foreign));
}

TEST_F(MpsManagerTest, RefusesWhileADaemonRunsInNvidiasDefaultPipeDirectoryThenStartsOnceItIsGone) {
  const int foreign = start_foreign(dir_ / "nvidia-mps");
  ASSERT_GT(foreign, 0);
  std::uint64_t now = 1'000'000'000;
  MpsManager m(options(), [&now] { return now; });
  m.tick();
  EXPECT_EQ(m.report().state, MpsState::Refused);
  EXPECT_NE(m.report().reason.find("pid " + std::to_string(foreign)), std::string::npos) << m.report().reason;
  ASSERT_TRUE(send_command(foreign_.front(), "quit", 2s));
  ASSERT_TRUE(wait_until([&] { return !process_alive(foreign); }));
  m.tick();
  EXPECT_EQ(m.report().state, MpsState::Refused) << "checked again only after the recheck interval";
  now += 100'000'000;
  m.tick();
  EXPECT_EQ(m.report().state, MpsState::Running) << m.report().reason;
  m.stop();
}

TEST_F(MpsManagerTest, RefusesMigAndAGpuHeldInExclusiveProcessModeButNotExclusiveModeAlone) {
  std::vector<DeviceMode> devices(2);
  devices[1].index = 1;
  ManagerOptions o = options();
  o.device_modes = [&devices]() -> Result<std::vector<DeviceMode>> { return devices; };

  devices[1].mig = true;
  {
    MpsManager m(o);
    m.tick();
    EXPECT_EQ(m.report().state, MpsState::Refused);
    EXPECT_NE(m.report().reason.find("GPU 1 has MIG mode on"), std::string::npos) << m.report().reason;
  }
  devices[1].mig = false;
  devices[0].compute = DeviceMode::Compute::ExclusiveProcess;
  devices[0].compute_pids = {4242};
  {
    MpsManager m(o);
    m.tick();
    EXPECT_EQ(m.report().state, MpsState::Refused);
    EXPECT_NE(m.report().reason.find("GPU 0 is in compute mode 'exclusive-process' and held by process 4242"),
              std::string::npos)
        << m.report().reason;
  }
  devices[0].compute = DeviceMode::Compute::Prohibited;
  devices[0].compute_pids.clear();
  {
    MpsManager m(o);
    m.tick();
    EXPECT_NE(m.report().reason.find("prohibited"), std::string::npos) << m.report().reason;
  }
  devices[0].compute = DeviceMode::Compute::ExclusiveProcess;
  {
    MpsManager m(o);
    m.tick();
    EXPECT_EQ(m.report().state, MpsState::Running) << m.report().reason;
    m.stop();
  }
  o.device_modes = []() -> Result<std::vector<DeviceMode>> { return make_error("NVML: driver not loaded"); };
  MpsManager m(o);
  m.tick();
  EXPECT_EQ(m.report().state, MpsState::Refused);
  EXPECT_NE(m.report().reason.find("NVML: driver not loaded"), std::string::npos);
}

TEST_F(MpsManagerTest, StopQuitsTheDaemonAndLeavesNothingBehind) {
  MpsManager m(options());
  m.tick();
  const int pid = m.report().control_pid;
  ASSERT_GT(pid, 0);
  ControlEnv env{GPUSLICE_FAKE_MPS_CONTROL, dir_ / "mps/pipe", dir_ / "mps/log"};
  ASSERT_TRUE(send_command(env, "start_server -uid " + std::to_string(::getuid()), 2s));
  m.tick();
  m.stop();
  EXPECT_EQ(m.report().state, MpsState::Off);
  EXPECT_EQ(m.report().control_pid, 0);
  EXPECT_FALSE(process_alive(pid));
  EXPECT_FALSE(exists(dir_ / "mps/pipe/control"));
  EXPECT_FALSE(exists(dir_ / "mps/pipe/nvidia-cuda-mps-control.pid"));
  EXPECT_FALSE(exists(dir_ / "mps/started.pid"));
  auto file = read_state_file(dir_ / "mps/state.json");
  ASSERT_TRUE(file) << file.error();
  EXPECT_EQ(file->state, MpsState::Off);
  auto client = send_command(env, "get_server_list", 2s);
  ASSERT_FALSE(client);
  EXPECT_NE(client.error().find("Cannot find MPS control daemon"), std::string::npos) << client.error();
}

TEST_F(MpsManagerTest, AdoptsTheDaemonAnEarlierRunStarted) {
  int pid = 0;
  {
    MpsManager first(options());
    first.tick();
    pid = first.report().control_pid;
    ASSERT_GT(pid, 0);
  }  // the manager ends without stop(): the daemon and its record stay
  MpsManager second(options());
  second.tick();
  EXPECT_EQ(second.report().state, MpsState::Running) << second.report().reason;
  EXPECT_EQ(second.report().control_pid, pid);
  EXPECT_EQ(second.report().restarts, 0u);
  second.stop();
  EXPECT_FALSE(process_alive(pid));
}

}  // namespace
}  // namespace gpuslice::node::mps
