// End to end: real programs, the real libgpuslice.so under LD_PRELOAD, the simulated driver.
// Each test gets its own shared-state and mock-state directories.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>
#include <tuple>

#include "process.h"

namespace gpuslice::test {
namespace {

constexpr long long kMiB = 1LL << 20;
constexpr long long kGiB = 1LL << 30;
constexpr long long kContextBytes = 64 * kMiB;  // what the mock driver charges per context

class E2E : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir("gpuslice-e2e-");
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override { remove_tree(dir_); }

  // The environment of a process in one "container": the mock driver, its own state directories.
  Env base_env(bool preload = true) const {
    return mock_container_env(dir_, 2, kContextBytes, GPUSLICE_MOCK_DIR,
                              preload ? GPUSLICE_PRELOAD : nullptr);
  }

  Outcome probe(const std::vector<std::string>& args, const Env& env) const {
    std::vector<std::string> argv{GPUSLICE_PROBE_APP};
    argv.insert(argv.end(), args.begin(), args.end());
    return run(argv, env);
  }

  // A probe that allocates `bytes`, reports the container's live numbers every 100 ms and stays 20 s.
  static std::vector<std::string> holder_argv(long long bytes) {
    return {GPUSLICE_PROBE_APP, "--scenario", "hold", "--bytes", std::to_string(bytes), "--seconds", "20"};
  }

  std::string dir_;
};

// The CUDA runtime's path, every cudaVersion generation and the per-thread-stream flag, the dlsym
// path and exported symbols: the quota holds whichever way the program reaches the driver.
struct PathCase {
  const char* path;
  int cuda_version;
  bool per_thread;
};

class QuotaEveryPath : public E2E, public ::testing::WithParamInterface<PathCase> {};

TEST_P(QuotaEveryPath, ReportsQuotaRefusesPastItAndRecoversAfterFree) {
  const PathCase& c = GetParam();
  Env env = base_env();
  env["GPUSLICE_MEMORY_LIMIT"] = "1Gi";
  std::vector<std::string> args{"--path",         c.path,
                                "--scenario",     "fill",
                                "--cuda-version", std::to_string(c.cuda_version),
                                "--chunk",        std::to_string(64 * kMiB)};
  if (c.per_thread) args.push_back("--per-thread");
  Outcome o = probe(args, env);
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_EQ(o.num("total"), kGiB);
  EXPECT_EQ(o.num("device_total"), kGiB);
  // The context's footprint is charged, so the free memory is the quota minus it.
  EXPECT_EQ(o.num("free"), kGiB - kContextBytes);
  EXPECT_EQ(o.num("refused_code"), 2);  // CUDA_ERROR_OUT_OF_MEMORY
  EXPECT_EQ(o.num("allocated"), ((kGiB - kContextBytes) / (64 * kMiB)) * 64 * kMiB);
  EXPECT_LT(o.num("after_free"), 64 * kMiB);
  EXPECT_EQ(o.num("retry_code"), 0);
  EXPECT_EQ(o.num("end_free"), kGiB - kContextBytes);
}

INSTANTIATE_TEST_SUITE_P(Paths, QuotaEveryPath,
                         ::testing::Values(PathCase{"procaddress", 13000, false},
                                           PathCase{"procaddress", 12000, false},
                                           PathCase{"procaddress", 11080, false},
                                           PathCase{"procaddress", 13000, true}, PathCase{"dlsym", 0, false},
                                           PathCase{"linked", 0, false}),
                         [](const ::testing::TestParamInfo<PathCase>& p) {
                           return std::string(p.param.path) + "_" + std::to_string(p.param.cuda_version) +
                                  (p.param.per_thread ? "_ptds" : "");
                         });

TEST_F(E2E, WithoutTheLibraryTheWholeCardIsVisible) {
  Env env = base_env(/*preload=*/false);
  env["GPUSLICE_MEMORY_LIMIT"] = "1Gi";
  Outcome o = probe({"--scenario", "fill", "--chunk", std::to_string(kGiB)}, env);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(o.num("total"), 16 * kGiB);
  EXPECT_GT(o.num("allocated"), 8 * kGiB);
}

TEST_F(E2E, EveryAllocationApiIsCountedAndRefusedPastTheQuota) {
  Env env = base_env();
  env["GPUSLICE_MEMORY_LIMIT"] = "1Gi";
  Outcome o = probe({"--scenario", "apis", "--chunk", std::to_string(128 * kMiB)}, env);
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  for (const char* api :
       {"cuMemAlloc", "cuMemAllocPitch", "cuMemAllocManaged", "cuMemAllocAsync", "cuMemAllocFromPoolAsync",
        "cuMemCreate", "cuArrayCreate", "cuArray3DCreate", "cuMipmappedArrayCreate"}) {
    std::string a = api;
    EXPECT_EQ(o.num(a + ".ok"), 0) << api;
    EXPECT_GE(o.num(a + ".drop"), 128 * kMiB) << api << " was not counted";
    EXPECT_LT(o.num(a + ".drop"), 129 * kMiB) << api;
    EXPECT_EQ(o.num(a + ".over_quota"), 2) << api << " was not refused";
  }
  // Everything was freed: the ledger is back to the context alone.
  EXPECT_EQ(o.num("end_free"), kGiB - kContextBytes);
}

TEST_F(E2E, PerDeviceQuotas) {
  Env env = base_env();
  env["GPUSLICE_MEMORY_LIMIT"] = "0=512Mi,1=2Gi";
  Outcome d0 = probe({"--scenario", "fill", "--device", "0"}, env);
  Outcome d1 = probe({"--scenario", "fill", "--device", "1"}, env);
  ASSERT_EQ(d0.exit_code, 0) << d0.err;
  ASSERT_EQ(d1.exit_code, 0) << d1.err;
  EXPECT_EQ(d0.num("total"), 512 * kMiB);
  EXPECT_EQ(d1.num("total"), 2 * kGiB);
  EXPECT_EQ(d0.num("refused_code"), 2);
  EXPECT_EQ(d1.num("refused_code"), 2);
}

TEST_F(E2E, NvmlReportsTheQuotaAndTheContainersUse) {
  Env env = base_env();
  env["GPUSLICE_MEMORY_LIMIT"] = "0=3Gi";
  std::string holder_out = dir_ + "/holder.out";
  Background holder(holder_argv(kGiB), env, holder_out);
  ASSERT_TRUE(holder.wait_for_output("hold_code=0", 10000)) << holder.output();
  Outcome o = probe({"--scenario", "nvml"}, env);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(o.num("nvml_init"), 0);
  EXPECT_EQ(o.num("nvml0_total"), 3 * kGiB);
  EXPECT_EQ(o.num("nvml0_v2_total"), 3 * kGiB);
  EXPECT_EQ(o.num("nvml0_used"), kGiB + kContextBytes);
  EXPECT_EQ(o.num("nvml0_free"), 2 * kGiB - kContextBytes);
  EXPECT_EQ(o.num("nvml1_total"), 16 * kGiB) << "device 1 has no quota";
}

TEST_F(E2E, TwoProcessesShareOneQuota) {
  Env env = base_env();
  env["GPUSLICE_MEMORY_LIMIT"] = "2Gi";
  Background holder(holder_argv(kGiB), env, dir_ + "/holder.out");
  ASSERT_TRUE(holder.wait_for_output("hold_code=0", 10000)) << holder.output();
  Outcome o = probe({"--scenario", "fill", "--chunk", std::to_string(64 * kMiB)}, env);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(o.num("total"), 2 * kGiB);
  EXPECT_EQ(o.num("free"), 2 * kGiB - kGiB - 2 * kContextBytes);
  EXPECT_LE(o.num("allocated"), kGiB - 2 * kContextBytes);
}

// In a PID namespace NVML lists host pids, not ours: the library recognises its own entry as the
// pid that appeared with its first context, so the context footprint is still charged and
// `gpuslice status` shows the host pid.
TEST_F(E2E, InAPidNamespaceTheContextIsChargedThroughTheHostPid) {
  constexpr long long kPidOffset = 1000000;
  Env env = base_env();
  env["GPUSLICE_MEMORY_LIMIT"] = "2Gi";
  env["GPUSLICE_MOCK_NVML_PID_OFFSET"] = std::to_string(kPidOffset);
  Background holder(holder_argv(kGiB), env, dir_ + "/holder.out");
  ASSERT_TRUE(holder.wait_for_output("hold_code=0", 10000)) << holder.output();
  Outcome o = probe({"--scenario", "fill", "--chunk", std::to_string(64 * kMiB)}, env);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(o.num("free"), 2 * kGiB - kGiB - 2 * kContextBytes) << "both contexts charged";
  Outcome status = run({GPUSLICE_CLI, "status", "--json", "--shared-dir", dir_ + "/shared"}, base_env(false));
  ASSERT_EQ(status.exit_code, 0) << status.err;
  // One process object (keys in the schema's order) carries both pids.
  std::string expected = "\"host_pid\":" + std::to_string(holder.pid() + kPidOffset) +
                         ",\"pid\":" + std::to_string(holder.pid());
  EXPECT_NE(status.out.find(expected), std::string::npos) << status.out;
}

TEST_F(E2E, AKilledProcessGivesItsMemoryBackWithinOneSecond) {
  Env env = base_env();
  env["GPUSLICE_MEMORY_LIMIT"] = "2Gi";
  // The survivor watches the ledger while the victim dies.
  Background survivor(holder_argv(256 * kMiB), env, dir_ + "/survivor.out");
  ASSERT_TRUE(survivor.wait_for_output("hold_code=0", 10000));
  Background victim(holder_argv(kGiB), env, dir_ + "/victim.out");
  ASSERT_TRUE(victim.wait_for_output("hold_code=0", 10000)) << victim.output();
  long long expected_after = 2 * kGiB - 256 * kMiB - kContextBytes;
  std::string needle = "live_free=" + std::to_string(expected_after - kGiB - kContextBytes);
  ASSERT_TRUE(survivor.wait_for_output(needle, 5000)) << survivor.output();
  victim.kill(SIGKILL);
  auto killed_at = std::chrono::steady_clock::now();
  victim.wait();
  ASSERT_TRUE(survivor.wait_for_output("live_free=" + std::to_string(expected_after), 3000))
      << survivor.output();
  auto took = std::chrono::steady_clock::now() - killed_at;
  // Reported, not asserted tightly: the survivor prints every 100 ms and reaps every 200 ms.
  RecordProperty("reclaim_ms",
                 static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
  EXPECT_LT(took, std::chrono::milliseconds(1500));
}

TEST_F(E2E, LiveSetChangesTheQuotaOfRunningProcesses) {
  Env env = base_env();
  env["GPUSLICE_MEMORY_LIMIT"] = "2Gi";
  Background app(holder_argv(128 * kMiB), env, dir_ + "/app.out");
  ASSERT_TRUE(app.wait_for_output("hold_code=0", 10000));
  Outcome set =
      run({GPUSLICE_CLI, "set", "--shared-dir", dir_ + "/shared", "--memory", "1Gi"}, base_env(false));
  ASSERT_EQ(set.exit_code, 0) << set.out << set.err;
  EXPECT_TRUE(app.wait_for_output("live_total=" + std::to_string(kGiB), 2000)) << app.output();
}

TEST_F(E2E, ReadOnlyLimitsFileCapsTheEnvironment) {
  {
    std::ofstream limits(dir_ + "/limits");
    limits << "# written by the node daemon\nGPUSLICE_MEMORY_LIMIT=768Mi\n";
  }
  Env env = base_env();
  env["GPUSLICE_MEMORY_LIMIT"] = "4Gi";  // the container asks for more than it is given
  Outcome o = probe({"--scenario", "fill"}, env);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(o.num("total"), 768 * kMiB);
}

// ---- the limits rule: min(request, read-only file cap), whichever changes, for every device ----

// The last value of `key=` in a probe's output so far, or -1.
long long last_value(const std::string& output, const std::string& key) {
  const std::string needle = key + "=";
  std::size_t at = output.rfind(needle);
  if (at == std::string::npos) return -1;
  return std::atoll(output.c_str() + at + needle.size());
}

void write_text(const std::string& path, const std::string& text) {
  // Through a rename, as the node daemon writes, so the watcher sees a new file in one step.
  std::ofstream(path + ".tmp") << text;
  std::filesystem::rename(path + ".tmp", path);
}

// The watcher re-reads the limits file every 100 ms; waiting this long lets it act several times.
void let_the_watcher_run() { std::this_thread::sleep_for(std::chrono::milliseconds(700)); }

TEST_F(E2E, LimitsFileNeverRaisesAStricterEnvironmentQuota) {
  write_text(dir_ + "/limits", "GPUSLICE_MEMORY_LIMIT=4Gi\n");
  Env env = base_env();
  env["GPUSLICE_MEMORY_LIMIT"] = "1Gi";
  Background app(holder_argv(128 * kMiB), env, dir_ + "/app.out");
  ASSERT_TRUE(app.wait_for_output("hold_code=0", 10000)) << app.output();
  let_the_watcher_run();
  EXPECT_EQ(app.output().find("live_total=" + std::to_string(4 * kGiB)), std::string::npos) << app.output();
  EXPECT_EQ(last_value(app.output(), "live_total"), kGiB) << app.output();
  // A second process of the container cannot take more than the 1 GiB either.
  Outcome fill = probe({"--scenario", "fill", "--chunk", std::to_string(64 * kMiB)}, env);
  ASSERT_EQ(fill.exit_code, 0) << fill.err;
  EXPECT_LE(fill.num("allocated"), kGiB - 128 * kMiB);
}

TEST_F(E2E, LimitsFileNeverRaisesAStricterEnvironmentComputeLimit) {
  write_text(dir_ + "/limits", "GPUSLICE_COMPUTE_LIMIT=60\n");
  Env env = base_env();
  env["GPUSLICE_COMPUTE_LIMIT"] = "20";
  // Launching for several seconds: the device is attached by the first launch.
  Background app({GPUSLICE_PROBE_APP, "--scenario", "launch", "--iterations", "4000", "--kernel-us", "500"},
                 env, dir_ + "/app.out");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  let_the_watcher_run();
  Outcome status = run({GPUSLICE_CLI, "status", "--json", "--shared-dir", dir_ + "/shared"}, base_env(false));
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_NE(status.out.find("\"compute_limit_percent\":20"), std::string::npos) << status.out;
}

TEST_F(E2E, AStricterLimitsFileLowersTheEnvironmentAndNoneRestoresIt) {
  Env env = base_env();
  env["GPUSLICE_MEMORY_LIMIT"] = "2Gi";
  Background app(holder_argv(128 * kMiB), env, dir_ + "/app.out");
  ASSERT_TRUE(app.wait_for_output("hold_code=0", 10000)) << app.output();
  write_text(dir_ + "/limits", "GPUSLICE_MEMORY_LIMIT=1Gi\n");
  EXPECT_TRUE(app.wait_for_output("live_total=" + std::to_string(kGiB), 3000)) << app.output();
  write_text(dir_ + "/limits", "GPUSLICE_MEMORY_LIMIT=none\n");
  let_the_watcher_run();
  EXPECT_EQ(last_value(app.output(), "live_total"), 2 * kGiB) << app.output();
}

// The attack: the operator's tool rewrites the limits file without a rename (truncate, then
// write), or deletes and recreates it. In between, the file is empty or missing; read as "no caps",
// every cap was lifted at the next tick, and a second process allocated 4 GiB under a 1 GiB cap.
class LimitsFileRewrite : public E2E {
 protected:
  // A process holding 128 MiB under the file's 1 GiB cap, before the rewrite starts.
  void start_under_a_file_cap() {
    write_text(dir_ + "/limits", "GPUSLICE_MEMORY_LIMIT=1Gi\n");
    app_ = std::make_unique<Background>(holder_argv(128 * kMiB), base_env(), dir_ + "/app.out");
    ASSERT_TRUE(app_->wait_for_output("live_total=" + std::to_string(kGiB), 10000)) << app_->output();
  }
  // Still capped: what the running process reports and what a second process can take.
  void expect_the_cap_holds() {
    let_the_watcher_run();
    EXPECT_EQ(last_value(app_->output(), "live_total"), kGiB) << app_->output();
    // A process started meanwhile either runs under the cap or fails closed, saying why.
    Outcome fill = probe({"--scenario", "fill", "--chunk", std::to_string(64 * kMiB)}, base_env());
    if (fill.exit_code == 0) {
      EXPECT_LE(fill.num("allocated"), kGiB) << fill.out;
    } else {
      EXPECT_NE(fill.err.find(dir_ + "/limits"), std::string::npos) << fill.err;
      EXPECT_EQ(fill.out.find("allocated="), std::string::npos) << fill.out;
    }
  }
  std::unique_ptr<Background> app_;
};

TEST_F(LimitsFileRewrite, AnEmptyLimitsFileDoesNotLiftTheCaps) {
  start_under_a_file_cap();
  std::ofstream(dir_ + "/limits", std::ios::trunc).close();  // truncated in place: empty
  expect_the_cap_holds();
}

TEST_F(LimitsFileRewrite, ALimitsFileMissingForAMomentDoesNotLiftTheCaps) {
  start_under_a_file_cap();
  std::filesystem::remove(dir_ + "/limits");
  expect_the_cap_holds();
  // Back with the same cap: nothing changes either.
  write_text(dir_ + "/limits", "GPUSLICE_MEMORY_LIMIT=1Gi\n");
  expect_the_cap_holds();
}

// A pod's container directory removed while the pod lived (the runtime then mounts an empty
// /etc/gpuslice): the limits file the daemon wrote is missing, which meant "no cap". With
// GPUSLICE_LIMITS_REQUIRED=1 (the device plugin sets it) CUDA fails closed instead.
TEST_F(E2E, ALimitsFileTheDaemonWroteThatIsMissingAtStartFailsClosed) {
  Env env = base_env();
  env["GPUSLICE_LIMITS_REQUIRED"] = "1";
  env["GPUSLICE_MEMORY_LIMIT"] = "4Gi";
  Outcome o = probe({"--scenario", "fill"}, env);
  EXPECT_EQ(o.exit_code, 4) << "cuInit must fail";
  EXPECT_NE(o.err.find("GPUSLICE_LIMITS_REQUIRED"), std::string::npos) << o.err;
  write_text(dir_ + "/limits", "GPUSLICE_MEMORY_LIMIT=1Gi\n");
  Outcome capped = probe({"--scenario", "fill"}, env);
  ASSERT_EQ(capped.exit_code, 0) << capped.err;
  EXPECT_EQ(capped.num("total"), kGiB);
}

// ...and a file that vanishes while the process runs keeps its cap (removing it used to lift it).
TEST_F(E2E, ALimitsFileTheDaemonWroteThatVanishesKeepsItsCap) {
  write_text(dir_ + "/limits", "GPUSLICE_MEMORY_LIMIT=1Gi\n");
  Env env = base_env();
  env["GPUSLICE_LIMITS_REQUIRED"] = "1";
  env["GPUSLICE_MEMORY_LIMIT"] = "2Gi";
  Background app(holder_argv(128 * kMiB), env, dir_ + "/app.out");
  ASSERT_TRUE(app.wait_for_output("hold_code=0", 10000)) << app.output();
  ASSERT_TRUE(app.wait_for_output("live_total=" + std::to_string(kGiB), 3000)) << app.output();
  std::filesystem::remove(dir_ + "/limits");
  let_the_watcher_run();
  EXPECT_EQ(last_value(app.output(), "live_total"), kGiB) << app.output();
}

TEST_F(E2E, SetMemoryIsNotUndoneWhenTheOperatorRewritesTheFile) {
  write_text(dir_ + "/limits", "GPUSLICE_MEMORY_LIMIT=4Gi\n");
  Env env = base_env();
  env["GPUSLICE_MEMORY_LIMIT"] = "2Gi";
  Background app(holder_argv(128 * kMiB), env, dir_ + "/app.out");
  ASSERT_TRUE(app.wait_for_output("hold_code=0", 10000)) << app.output();
  Outcome set =
      run({GPUSLICE_CLI, "set", "--shared-dir", dir_ + "/shared", "--memory", "1Gi"}, base_env(false));
  ASSERT_EQ(set.exit_code, 0) << set.out << set.err;
  ASSERT_TRUE(app.wait_for_output("live_total=" + std::to_string(kGiB), 3000)) << app.output();
  // The operator rewrites the file for another key; the memory cap it keeps is above the request.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a new mtime even on coarse clocks
  write_text(dir_ + "/limits", "GPUSLICE_MEMORY_LIMIT=4Gi\nGPUSLICE_COMPUTE_LIMIT=90\n");
  let_the_watcher_run();
  EXPECT_EQ(last_value(app.output(), "live_total"), kGiB) << app.output();
}

// A container whose limits file caps memory at 1 GiB: `gpuslice set --memory unlimited` on it used
// to exit 0, so a script went on as if the quota had been lifted. It says the cap holds, in its
// output and its exit status (3), and the cap stays enforced on the running process and a new one.
TEST_F(E2E, SetUnlimitedUnderALimitsFileCapSaysTheCapHoldsAndExitsNonZero) {
  write_text(dir_ + "/limits", "GPUSLICE_MEMORY_LIMIT=1Gi\n");
  Env env = base_env();
  env["GPUSLICE_MEMORY_LIMIT"] = "1Gi";  // what the device plugin hands a vram container beside the file
  Background app(holder_argv(128 * kMiB), env, dir_ + "/app.out");
  ASSERT_TRUE(app.wait_for_output("hold_code=0", 10000)) << app.output();
  Outcome set =
      run({GPUSLICE_CLI, "set", "--shared-dir", dir_ + "/shared", "--memory", "unlimited"}, base_env(false));
  EXPECT_EQ(set.exit_code, 3) << set.out << set.err;
  EXPECT_NE(set.out.find("memory quota 1 GiB -> 1 GiB (requested unlimited; the container's cap is 1 GiB, so "
                         "1 GiB stays enforced)"),
            std::string::npos)
      << set.out;
  EXPECT_NE(set.err.find("the request is kept and applies once the cap allows it"), std::string::npos)
      << set.err;
  let_the_watcher_run();
  EXPECT_EQ(last_value(app.output(), "live_total"), kGiB) << app.output();
  Outcome fill = probe({"--scenario", "fill", "--chunk", std::to_string(64 * kMiB)}, env);
  ASSERT_EQ(fill.exit_code, 0) << fill.err;
  EXPECT_LE(fill.num("allocated"), kGiB) << fill.out;
}

TEST_F(E2E, ADeviceAttachedLateStillGetsTheFileCap) {
  Env env = base_env();
  env["GPUSLICE_MEMORY_LIMIT"] = "2Gi";
  std::vector<std::string> argv = holder_argv(128 * kMiB);
  const std::string trigger = dir_ + "/attach-device-1";
  argv.insert(argv.end(), {"--late-device", "1", "--late-trigger", trigger});
  Background app(argv, env, dir_ + "/app.out");
  ASSERT_TRUE(app.wait_for_output("hold_code=0", 10000)) << app.output();
  write_text(dir_ + "/limits", "GPUSLICE_MEMORY_LIMIT=1Gi\n");
  ASSERT_TRUE(app.wait_for_output("live_total=" + std::to_string(kGiB), 3000)) << app.output();
  std::ofstream(trigger) << "now\n";
  ASSERT_TRUE(app.wait_for_output("late_total=", 3000)) << app.output();
  EXPECT_EQ(last_value(app.output(), "late_code"), 0);
  EXPECT_EQ(last_value(app.output(), "late_total"), kGiB) << app.output();
}

TEST_F(E2E, AProcessStartedWithoutAnyLimitTakesACapWrittenLater) {
  Env env = base_env();  // no request; the limits file's directory exists, the file does not yet
  Background app(holder_argv(128 * kMiB), env, dir_ + "/app.out");
  // The numbers follow hold_code: the line after them says they are all out.
  ASSERT_TRUE(app.wait_for_output("device_total=", 10000)) << app.output();
  EXPECT_EQ(last_value(app.output(), "total"), 16 * kGiB) << app.output();
  write_text(dir_ + "/limits", "GPUSLICE_MEMORY_LIMIT=1Gi\n");
  ASSERT_TRUE(app.wait_for_output("live_total=" + std::to_string(kGiB), 3000)) << app.output();
  // What it allocated before the cap came is charged too, with its context (the driver's figure).
  EXPECT_TRUE(app.wait_for_output("live_free=" + std::to_string(kGiB - 128 * kMiB - kContextBytes), 3000))
      << app.output();
  Outcome fill = probe({"--scenario", "fill", "--chunk", std::to_string(64 * kMiB)}, env);
  ASSERT_EQ(fill.exit_code, 0) << fill.err;
  EXPECT_LE(fill.num("allocated"), kGiB - 128 * kMiB - 2 * kContextBytes) << fill.out;
}

struct DialectCase {
  const char* variable;
  const char* value;
  long long expected_total;
};

class CompatibilityDialects : public E2E, public ::testing::WithParamInterface<DialectCase> {};

TEST_P(CompatibilityDialects, SetTheQuota) {
  Env env = base_env();
  env[GetParam().variable] = GetParam().value;
  Outcome o = probe({"--scenario", "fill", "--chunk", std::to_string(32 * kMiB)}, env);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(o.num("total"), GetParam().expected_total);
  EXPECT_EQ(o.num("refused_code"), 2);
}

INSTANTIATE_TEST_SUITE_P(
    Dialects, CompatibilityDialects,
    ::testing::Values(DialectCase{"HCS_VRAM_QUOTA", "1Gi", kGiB},
                      DialectCase{"HCS_VRAM_QUOTA", "1G", 1000000000LL},
                      DialectCase{"CUDA_DEVICE_MEMORY_LIMIT", "1g", kGiB},
                      DialectCase{"CUDA_DEVICE_MEMORY_LIMIT_0", "1536m", 1536 * kMiB},
                      DialectCase{"TENSOR_FUSION_CUDA_MEM_LIMIT", "{\"0\": 1073741824}", kGiB},
                      DialectCase{"TENSOR_FUSION_CUDA_MEM_LIMIT",
                                  "{\"gpu-6D6F636B-0000-4000-8000-000000000000\": 1073741824}", kGiB},
                      DialectCase{"VCUDA_MEMORY_LIMIT", "1073741824", kGiB},
                      DialectCase{"GPUSLICE_MEMORY_LIMIT", "{\"0\": \"1Gi\"}", kGiB}),
    [](const ::testing::TestParamInfo<DialectCase>& p) {
      return std::string(p.param.variable) + "_" + std::to_string(p.index);
    });

TEST_F(E2E, MalformedConfigurationFailsClosedWithOneClearMessage) {
  Env env = base_env();
  env["GPUSLICE_MEMORY_LIMIT"] = "8Gx";
  Outcome o = probe({"--scenario", "fill"}, env);
  EXPECT_EQ(o.exit_code, 4) << "cuInit must fail";
  EXPECT_NE(o.num("init"), 0);
  EXPECT_NE(o.err.find("GPUSLICE_MEMORY_LIMIT"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("8Gx"), std::string::npos) << o.err;
}

// HAMi-style per-device variables that name no device ordinal used to be ignored: no limit at all.
TEST_F(E2E, APerDeviceVariableWithALeadingZeroFailsClosed) {
  Env env = base_env();
  env["CUDA_DEVICE_MEMORY_LIMIT_00"] = "1g";
  Outcome o = probe({"--scenario", "fill"}, env);
  EXPECT_EQ(o.exit_code, 4) << "cuInit must fail";
  EXPECT_NE(o.err.find("CUDA_DEVICE_MEMORY_LIMIT_00"), std::string::npos) << o.err;
}

TEST_F(E2E, APerDeviceVariableBeyondTheLastOrdinalFailsClosed) {
  Env env = base_env();
  env["CUDA_DEVICE_SM_LIMIT_64"] = "20";
  Outcome o = probe({"--scenario", "fill"}, env);
  EXPECT_EQ(o.exit_code, 4) << "cuInit must fail";
  EXPECT_NE(o.err.find("CUDA_DEVICE_SM_LIMIT_64"), std::string::npos) << o.err;
}

// Per-device variables count the devices the process sees: one for a device the container does not
// have means a wrong configuration (the device it has may be left unlimited), so CUDA fails closed,
// naming the variable.
TEST_F(E2E, APerDeviceLimitForADeviceTheProcessDoesNotSeeFailsClosed) {
  for (const auto& [variable, value] : std::vector<std::pair<std::string, std::string>>{
           {"CUDA_DEVICE_MEMORY_LIMIT_5", "1g"}, {"GPUSLICE_MEMORY_LIMIT", "0=1Gi,2=1Gi"}}) {
    Env env = base_env();  // two devices
    env[variable] = value;
    Outcome o = probe({"--scenario", "fill"}, env);
    EXPECT_EQ(o.exit_code, 4) << variable << ": cuInit must fail\n" << o.err;
    EXPECT_NE(o.err.find(variable + "='" + value + "': names CUDA device"), std::string::npos) << o.err;
    EXPECT_NE(o.err.find("this process sees 2 device(s)"), std::string::npos) << o.err;
  }
  // Every device named exists: runs.
  Env env = base_env();
  env["CUDA_DEVICE_MEMORY_LIMIT_1"] = "1g";
  EXPECT_EQ(probe({"--scenario", "fill"}, env).exit_code, 0);
  // A process that chose to see part of the container's devices (a launcher's worker) runs, told.
  // (The simulated driver shows both devices whatever CUDA_VISIBLE_DEVICES says.)
  env["CUDA_VISIBLE_DEVICES"] = "0,1";
  env["CUDA_DEVICE_MEMORY_LIMIT_5"] = "1g";
  Outcome subset = probe({"--scenario", "fill"}, env);
  EXPECT_EQ(subset.exit_code, 0) << subset.err;
  EXPECT_NE(
      subset.err.find("CUDA_DEVICE_MEMORY_LIMIT_5='1g' names CUDA device 5, but CUDA_VISIBLE_DEVICES='0,1'"),
      std::string::npos)
      << subset.err;
}

TEST_F(E2E, AnAllOnesQuotaFailsClosedInsteadOfMeaningUnlimited) {
  Env env = base_env();
  env["GPUSLICE_MEMORY_LIMIT"] = "18446744073709551615";
  Outcome o = probe({"--scenario", "fill"}, env);
  EXPECT_EQ(o.exit_code, 4) << "cuInit must fail";
  EXPECT_NE(o.err.find("GPUSLICE_MEMORY_LIMIT"), std::string::npos) << o.err;
}

TEST_F(E2E, CorruptSharedStateFailsClosed) {
  std::filesystem::create_directories(dir_ + "/shared");
  {
    std::ofstream bad(dir_ + "/shared/state");
    bad << "this is not a gpuslice state file, but it is long enough to be mistaken for one if unchecked";
  }
  Env env = base_env();
  env["GPUSLICE_MEMORY_LIMIT"] = "1Gi";
  Outcome o = probe({"--scenario", "fill"}, env);
  EXPECT_EQ(o.exit_code, 4) << o.out;
  EXPECT_NE(o.err.find(dir_ + "/shared/state"), std::string::npos) << o.err;
}

TEST_F(E2E, ThreadsAllocatingAtOnceLeaveTheLedgerExact) {
  Env env = base_env();
  env["GPUSLICE_MEMORY_LIMIT"] = "1Gi";
  Outcome o = probe({"--scenario", "threads", "--threads", "8", "--iterations", "3000"}, env);
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_EQ(o.num("failures"), 0);
  EXPECT_GT(o.num("refusals"), 0) << "the quota should have been hit";
  EXPECT_EQ(o.num("end_free"), kGiB - kContextBytes);
}

TEST_F(E2E, AForkedChildIsChargedOnlyForItsOwnMemory) {
  Env env = base_env();
  env["GPUSLICE_MEMORY_LIMIT"] = "2Gi";
  Outcome o = probe({"--scenario", "fork", "--bytes", std::to_string(512 * kMiB)}, env);
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_EQ(o.num("child_status"), 0);
  EXPECT_EQ(o.num("child_alloc"), 0);
  // The parent's 512 MiB and context are charged once; the child's context once more.
  EXPECT_EQ(o.num("child_free"), 2 * kGiB - 512 * kMiB - 2 * kContextBytes);
  // After the child exits, its share is reaped; the parent's remains.
  EXPECT_LE(o.num("parent_free"), 2 * kGiB - 512 * kMiB - kContextBytes);
}

TEST_F(E2E, ProfilerWritesAlnairFiles) {
  Env env = base_env();
  env["PFLOG"] = dir_ + "/profile";
  Outcome o = probe({"--scenario", "launch", "--iterations", "50"}, env);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  std::ifstream metrics(dir_ + "/profile/metrics.log");
  std::stringstream ss;
  ss << metrics.rdbuf();
  std::string m = ss.str();
  EXPECT_NE(m.find("name:cuLaunchKernel\ncount:50\n"), std::string::npos) << m;
  EXPECT_NE(m.find("name:cuInit\ncount:1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("name:cuMemcpyH2D\ncount:1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("name:cuMemcpyD2H\ncount:1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("name:cuGetProcAddress\n"), std::string::npos) << m;
  std::ifstream timeline(dir_ + "/profile/timeline.log");
  std::string line;
  int launches = 0;
  while (std::getline(timeline, line))
    if (line.rfind("name:cuLaunchKernel start:", 0) == 0) ++launches;
  EXPECT_EQ(launches, 50);
}

// CUDA 13's runtime asks cuGetProcAddress for "cuCtxSynchronize" at version 13000 and gets
// cuCtxSynchronize_v2 (it names its context): that sync must reach the hook too, or the compute
// and priority gates never see cudaDeviceSynchronize (the profile shows the call either way only
// when it went through the library).
TEST_F(E2E, TheCuda13ContextSynchronizeGoesThroughTheHook) {
  for (const char* version : {"13000", "12000"}) {
    Env env = base_env();
    env["PFLOG"] = dir_ + "/profile-" + version;
    Outcome o = probe(
        {"--path", "procaddress", "--cuda-version", version, "--scenario", "launch", "--iterations", "3"},
        env);
    ASSERT_EQ(o.exit_code, 0) << o.err;
    std::ifstream metrics(dir_ + "/profile-" + version + "/metrics.log");
    std::stringstream ss;
    ss << metrics.rdbuf();
    EXPECT_NE(ss.str().find("name:cuCtxSynchronize\ncount:1\n"), std::string::npos) << version << "\n"
                                                                                    << ss.str();
  }
}

// The simulated device runs each kernel for its nominal time; under a 25% limit the same work must
// take at least about four times as long. Only a lower bound is asserted: a loaded machine can
// only make the run slower, never make throttling look stronger than it is.
TEST_F(E2E, ComputeLimitStretchesDeviceTimeToTheLimit) {
  Env env = base_env();
  std::vector<std::string> args{"--scenario", "launch", "--iterations", "600", "--kernel-us", "500"};
  Outcome free_run = probe(args, env);
  ASSERT_EQ(free_run.exit_code, 0) << free_run.err;
  env["GPUSLICE_COMPUTE_LIMIT"] = "25";
  Outcome limited = probe(args, env);
  ASSERT_EQ(limited.exit_code, 0) << limited.err;
  const double device_ns = 600 * 500e3;
  EXPECT_GE(free_run.num("launch_wall_ns"), device_ns * 0.95);
  EXPECT_GE(limited.num("launch_wall_ns"), device_ns / 0.25 * 0.8)
      << "unlimited " << free_run.num("launch_wall_ns") << " ns, limited " << limited.num("launch_wall_ns");
  RecordProperty("achieved_share_percent",
                 static_cast<int>(100.0 * device_ns / static_cast<double>(limited.num("launch_wall_ns"))));
}

TEST_F(E2E, WithoutLimitsNothingIsCreatedAndNothingChanges) {
  Env env = base_env();
  Outcome o = probe({"--scenario", "launch", "--iterations", "10"}, env);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/shared/state"));
  EXPECT_TRUE(o.err.empty()) << o.err;
}

TEST_F(E2E, CliRunSetsTheLimitsAndPassesTheExitStatus) {
  Env env = base_env(/*preload=*/false);
  Outcome o = run({GPUSLICE_CLI, "run", "--library", GPUSLICE_PRELOAD, "--memory", "1Gi", "--shared-dir",
                   dir_ + "/shared", "--", GPUSLICE_PROBE_APP, "--scenario", "fill"},
                  env);
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_EQ(o.num("total"), kGiB);
  EXPECT_EQ(o.num("refused_code"), 2);
}

// Nsight Compute preloads an injection library that carries the driver's soname and exports every
// entry point (so dlopen("libcuda.so.1") returns it), while the driver's cuGetProcAddress hands out
// the driver's own functions. The quota must hold on every path all the same.
class QuotaUnderProfilerInjection : public E2E, public ::testing::WithParamInterface<const char*> {};

TEST_P(QuotaUnderProfilerInjection, QuotaHoldsWhenAToolLibraryTakesTheDriversSoname) {
  Env env = base_env();
  env["LD_PRELOAD"] =
      std::string(GPUSLICE_PRELOAD) + ":" + GPUSLICE_MOCK_DIR + "/tool/libgpuslice-tool-injection.so";
  env["GPUSLICE_TOOL_REAL_DRIVER"] = std::string(GPUSLICE_MOCK_DIR) + "/libcuda.so.1";
  env["GPUSLICE_MEMORY_LIMIT"] = "1Gi";
  Outcome o = probe({"--path", GetParam(), "--scenario", "fill", "--chunk", std::to_string(64 * kMiB)}, env);
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_EQ(o.num("total"), kGiB);
  EXPECT_EQ(o.num("device_total"), kGiB);
  EXPECT_EQ(o.num("refused_code"), 2);
  EXPECT_LE(o.num("allocated"), kGiB - kContextBytes);
  EXPECT_EQ(o.num("retry_code"), 0);
}

INSTANTIATE_TEST_SUITE_P(Paths, QuotaUnderProfilerInjection,
                         ::testing::Values("procaddress", "dlsym", "linked"));

#if defined(GPUSLICE_PRELOAD_AB)
// The overhead benchmark's build: bypassed, every handed-out function is the driver's own; not
// bypassed, the quota holds as with the production library.
TEST_F(E2E, TheBenchmarksAbSwitchRoutesToTheHookOrStraightToTheDriver) {
  Env env = base_env();
  env["LD_PRELOAD"] = GPUSLICE_PRELOAD_AB;
  env["GPUSLICE_MEMORY_LIMIT"] = "1Gi";
  Outcome hooked = probe({"--scenario", "fill", "--chunk", std::to_string(64 * kMiB)}, env);
  ASSERT_EQ(hooked.exit_code, 0) << hooked.out << hooked.err;
  EXPECT_EQ(hooked.num("total"), kGiB);
  EXPECT_EQ(hooked.num("refused_code"), 2);
  env["GPUSLICE_AB_BYPASS"] = "1";
  Outcome bypassed = probe({"--scenario", "fill", "--chunk", std::to_string(kGiB)}, env);
  ASSERT_EQ(bypassed.exit_code, 0) << bypassed.out << bypassed.err;
  EXPECT_EQ(bypassed.num("total"), 16 * kGiB);
  EXPECT_GT(bypassed.num("allocated"), 8 * kGiB);
}
#endif

// The injected library must not drag its C++ runtime or internals into the host process.
TEST(InjectedLibrary, ExportsOnlyHookedSymbolsAndNeedsOnlyLibc) {
  Outcome syms = run({"/usr/bin/nm", "-D", "--defined-only", GPUSLICE_PRELOAD}, {{"PATH", "/usr/bin:/bin"}});
  ASSERT_EQ(syms.exit_code, 0) << syms.err;
  std::istringstream in(syms.out);
  std::string line;
  int exported = 0;
  while (std::getline(in, line)) {
    std::string name = line.substr(line.rfind(' ') + 1);
    if (name.empty()) continue;
    bool ours = name.rfind("cu", 0) == 0 || name.rfind("nvml", 0) == 0 || name == "dlsym";
    EXPECT_TRUE(ours) << "unexpected export: " << name;
    ++exported;
  }
  EXPECT_GT(exported, 40);
  Outcome needed = run({"/usr/bin/readelf", "-d", GPUSLICE_PRELOAD}, {{"PATH", "/usr/bin:/bin"}});
  EXPECT_EQ(needed.out.find("libstdc++"), std::string::npos) << needed.out;
  EXPECT_EQ(needed.out.find("libgcc_s"), std::string::npos) << needed.out;
}

// ---- what the driver takes for itself: charged before it is taken, refused past the quota ----

constexpr long long kTolerance = 64 * kMiB;
constexpr long long kResidentThreads = 132 * 2048;  // the simulated device's SMs x threads per SM

class DriverPaths : public E2E {
 protected:
  Outcome reservation(const std::string& what, long long bytes, long long held = 0, long long lazy = 0,
                      long long more = kMiB) {
    Env env = base_env();
    env["GPUSLICE_MEMORY_LIMIT"] = "1Gi";
    Outcome o =
        probe({"--scenario", "reservation", "--what", what, "--bytes", std::to_string(bytes), "--held",
               std::to_string(held), "--chunk", std::to_string(lazy), "--more", std::to_string(more)},
              env);
    EXPECT_EQ(o.exit_code, 0) << o.out << o.err;
    return o;
  }
};

TEST_F(DriverPaths, AMallocHeapLimitPastTheQuotaIsRefusedBeforeTheDriverReservesIt) {
  Outcome o = reservation("heap", 2 * kGiB);
  EXPECT_EQ(o.num("set_code"), 2) << o.out;
  EXPECT_LE(o.num("driver_used"), kGiB + kTolerance) << "the driver holds more than the quota";
  EXPECT_EQ(o.num("more_code"), 0);
}

TEST_F(DriverPaths, AStackLimitPastTheQuotaIsRefusedBeforeTheDriverReservesIt) {
  Outcome refused = reservation("stack", 8 * 1024);  // 7 KiB more x 270,336 threads: 1.8 GiB
  EXPECT_EQ(refused.num("set_code"), 2) << refused.out;
  EXPECT_LE(refused.num("driver_used"), kGiB + kTolerance);
}

TEST_F(DriverPaths, AStackLimitReservesThePerThreadSizeForEveryResidentThread) {
  Outcome granted = reservation("stack", 2 * 1024);  // 1 KiB more: 264 MiB, counted
  EXPECT_EQ(granted.num("set_code"), 0) << granted.out;
  EXPECT_EQ(granted.num("free"), kGiB - kContextBytes - 1024 * kResidentThreads);
}

TEST_F(DriverPaths, AKernelWhoseLocalMemoryWouldGrowTheStackPastTheQuotaIsNotLaunched) {
  Outcome o = reservation("growth", 8 * 1024);
  EXPECT_EQ(o.num("load_code"), 0) << o.out;
  EXPECT_EQ(o.num("launch_code"), 2) << o.out;
  EXPECT_LE(o.num("driver_used"), kGiB + kTolerance);
  EXPECT_EQ(o.num("more_code"), 0);
}

TEST_F(DriverPaths, AGraphAllocationNodeThatCouldNeverFitIsRefusedWhenAdded) {
  Outcome o = reservation("graph", 2 * kGiB);
  EXPECT_EQ(o.num("node_code"), 2) << o.out;
  EXPECT_LE(o.num("driver_used"), kGiB + kTolerance);
}

TEST_F(DriverPaths, AGraphWhosePoolWouldPassTheQuotaIsNotLaunched) {
  Outcome o = reservation("graph", 768 * kMiB, /*held=*/512 * kMiB);
  EXPECT_EQ(o.num("node_code"), 0) << o.out;
  EXPECT_EQ(o.num("launch_code"), 2) << o.out;
  EXPECT_LE(o.num("driver_used"), kGiB + kTolerance);
}

TEST_F(DriverPaths, AGraphPoolWithinTheQuotaIsCountedAfterItsLaunch) {
  Outcome o = reservation("graph", 256 * kMiB);
  EXPECT_EQ(o.num("launch_code"), 0) << o.out;
  EXPECT_EQ(o.num("later_free"), kGiB - kContextBytes - 256 * kMiB) << "the pool keeps its memory";
}

TEST_F(DriverPaths, AnAllocationThatFitsOnlyOnceTheGraphPoolIsTrimmedIsGranted) {
  // The pool keeps the 512 MiB its graph used: 64 + 512 + 600 MiB would pass the quota, 64 + 600 do not.
  Outcome o = reservation("graph", 512 * kMiB, /*held=*/0, /*lazy=*/0, /*more=*/600 * kMiB);
  EXPECT_EQ(o.num("launch_code"), 0) << o.out;
  EXPECT_EQ(o.num("later_free"), kGiB - kContextBytes - 512 * kMiB) << "the pool keeps its memory";
  EXPECT_EQ(o.num("more_code"), 0) << "the pool's unused memory went back to the device first";
}

TEST_F(DriverPaths, ModuleGlobalsAndLazilyLoadedCodeAreChargedAndRefuseWhatWouldFollow) {
  // 700 MiB held, a module with 128 MiB of globals and 256 MiB of code loaded at its first launch.
  Outcome o = reservation("module", 128 * kMiB, /*held=*/700 * kMiB, /*lazy=*/256 * kMiB);
  EXPECT_EQ(o.num("load_code"), 0) << o.out;
  EXPECT_EQ(o.num("launch_code"), 0) << o.out;
  // The first launch's loading cannot be sized before it happens: at once, the books hold it.
  EXPECT_EQ(o.num("free"), 0) << o.out;
  EXPECT_EQ(o.num("more_code"), 2) << "the container is over its quota: nothing more until it is below";
}

TEST_F(DriverPaths, AModuleWhoseDeclaredGlobalsWouldPassTheQuotaIsNotLoaded) {
  Outcome o = reservation("ptx", 512 * kMiB, /*held=*/600 * kMiB);
  EXPECT_EQ(o.num("load_code"), 2) << o.out;
  EXPECT_LE(o.num("driver_used"), kGiB + kTolerance);
  Outcome fits = reservation("ptx", 128 * kMiB, /*held=*/600 * kMiB);
  EXPECT_EQ(fits.num("load_code"), 0) << fits.out;
}

TEST_F(DriverPaths, WhatNoHookSawIsChargedWithinAReconciliationInterval) {
  Outcome within = reservation("unseen", 300 * kMiB, /*held=*/100 * kMiB);
  EXPECT_EQ(within.num("load_code"), 0) << within.out;
  EXPECT_EQ(within.num("later_driver_used"), kContextBytes + 400 * kMiB);
  EXPECT_EQ(within.num("later_free"), kGiB - kContextBytes - 400 * kMiB)
      << "free memory is the driver's figure";
  Outcome over = reservation("unseen", 300 * kMiB, /*held=*/800 * kMiB);
  EXPECT_EQ(over.num("later_free"), 0) << over.out;
  EXPECT_EQ(over.num("more_code"), 2) << "at or over the quota, every allocation is refused";
}

// The program's own image: a fat binary nvcc 13 built (tests/e2e/fixtures), loaded as the runtime
// does, through its wrapper, as data or as a file. Its globals are charged before the load.
class ImageGlobals : public DriverPaths, public ::testing::WithParamInterface<const char*> {
 protected:
  Outcome load(const char* fixture, long long held, const char* loading = "LAZY") {
    Env env = base_env();
    env["GPUSLICE_MEMORY_LIMIT"] = "1Gi";
    env["CUDA_MODULE_LOADING"] = loading;
    Outcome o = probe({"--scenario", "reservation", "--what", GetParam(), "--held", std::to_string(held),
                       "--image", std::string(GPUSLICE_FIXTURES) + "/" + fixture},
                      env);
    EXPECT_EQ(o.exit_code, 0) << o.out << o.err;
    return o;
  }
};

TEST_P(ImageGlobals, TwelveGibibytesOfGlobalsAreRefusedBeforeTheLoad) {
  for (const char* loading : {"LAZY", "EAGER"}) {
    Outcome o = load("globals_3x4g.fatbin", 0, loading);
    EXPECT_EQ(o.num("load_code"), 2) << loading << "\n" << o.out;
    EXPECT_LE(o.num("driver_used"), kGiB + kTolerance) << loading;
  }
}

TEST_P(ImageGlobals, GlobalsThatFitAreChargedAtTheLoadAndNotAgainAtTheFirstLaunch) {
  Outcome o = load("globals_3x128m.fatbin", 128 * kMiB);
  EXPECT_EQ(o.num("load_code"), 0) << o.out;
  EXPECT_EQ(o.num("loaded_free"), kGiB - kContextBytes - 128 * kMiB - 386 * kMiB) << "384 MiB and constants";
  EXPECT_EQ(o.num("launch_code"), 0) << o.out;
  EXPECT_LE(o.num("driver_used"), kGiB + kTolerance);
  EXPECT_EQ(o.num("later_free"), kGiB - kContextBytes - 128 * kMiB - 386 * kMiB) << "charged once";
  Outcome over = load("globals_3x128m.fatbin", 600 * kMiB);
  EXPECT_EQ(over.num("load_code"), 2) << over.out;
  EXPECT_LE(over.num("driver_used"), kGiB + kTolerance);
}

INSTANTIATE_TEST_SUITE_P(Ways, ImageGlobals, ::testing::Values("wrapper", "image", "file"));

// Every context beyond the first takes its own footprint (about 590 MiB on an H200): 64 of them under
// a quota stop at the quota, before the driver creates the one that would not fit.
class FurtherContexts : public DriverPaths, public ::testing::WithParamInterface<const char*> {};

TEST_P(FurtherContexts, StopAtTheQuotaAndGiveTheirFootprintBackWhenDestroyed) {
  constexpr long long kFurther = 100 * kMiB;  // what the simulated driver takes per further context
  Env env = base_env();
  env["GPUSLICE_MEMORY_LIMIT"] = "1Gi";
  env["GPUSLICE_MOCK_FURTHER_CONTEXT_BYTES"] = std::to_string(kFurther);
  Outcome o = probe({"--scenario", "contexts", "--what", GetParam(), "--iterations", "64"}, env);
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_EQ(o.num("refused_code"), 2) << o.out;  // CUDA_ERROR_OUT_OF_MEMORY
  EXPECT_LE(o.num("peak_driver_used"), kGiB + kTolerance) << "the driver took contexts past the quota";
  EXPECT_EQ(o.num("created"), (kGiB - kContextBytes) / kFurther) << "every context that fits is created";
  EXPECT_EQ(o.num("destroyed_driver_used"), kContextBytes);
  EXPECT_EQ(o.num("destroyed_free"), kGiB - kContextBytes) << "destroying gives the footprints back at once";
  EXPECT_EQ(o.num("again_code"), 0);
}

INSTANTIATE_TEST_SUITE_P(Kinds, FurtherContexts, ::testing::Values("created", "green"));

// A context's first launch takes launch resources of its own (about 140 MiB on an H200, driver 580)
// that no look at the driver's figure right after the creation sees: a further context reserves them
// with its footprint, so contexts each launched once still stop at the quota.
TEST_F(DriverPaths, FurtherContextsReserveWhatTheirFirstLaunchTakes) {
  constexpr long long kFurther = 100 * kMiB;
  constexpr long long kFirstLaunch = 48 * kMiB;  // below the tolerance: one unlearnt launch may pass
  Env env = base_env();
  env["GPUSLICE_MEMORY_LIMIT"] = "1Gi";
  env["GPUSLICE_MOCK_FURTHER_CONTEXT_BYTES"] = std::to_string(kFurther);
  env["GPUSLICE_MOCK_FIRST_LAUNCH_BYTES"] = std::to_string(kFirstLaunch);
  Outcome o = probe({"--scenario", "contexts", "--what", "created", "--iterations", "64"}, env);
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_EQ(o.num("refused_code"), 2) << o.out;
  EXPECT_LE(o.num("peak_driver_used"), kGiB + kTolerance) << "first launches took contexts past the quota";
  EXPECT_GE(o.num("created"), (kGiB - kContextBytes) / (kFurther + kFirstLaunch) - 1) << o.out;
  EXPECT_EQ(o.num("destroyed_driver_used"), kContextBytes);
  EXPECT_EQ(o.num("again_code"), 0) << "destroying gives the footprints back";
}

// The CUDA 12+ runtime loads the program's fat binary as a library before any context exists; the
// driver loads its globals into each context at its creation (EAGER) or first launch (lazy). The
// context reserves them before the driver creates it.
class LibraryBeforeContext : public DriverPaths,
                             public ::testing::WithParamInterface<std::tuple<const char*, const char*>> {
 protected:
  Outcome run(const char* fixture) {
    Env env = base_env();
    env["GPUSLICE_MEMORY_LIMIT"] = "1Gi";
    env["CUDA_MODULE_LOADING"] = std::get<0>(GetParam());
    Outcome o = probe({"--scenario", "library-first", "--what", std::get<1>(GetParam()), "--image",
                       std::string(GPUSLICE_FIXTURES) + "/" + fixture},
                      env);
    EXPECT_EQ(o.exit_code, 0) << o.out << o.err;
    EXPECT_EQ(o.num("library_code"), 0) << o.out;
    return o;
  }
};

TEST_P(LibraryBeforeContext, TwelveGibibytesOfGlobalsRefuseTheContext) {
  Outcome o = run("globals_3x4g.fatbin");
  EXPECT_EQ(o.num("context_code"), 2) << o.out;  // CUDA_ERROR_OUT_OF_MEMORY
  EXPECT_LE(o.num("peak_driver_used"), kGiB + kTolerance) << "the driver took the globals past the quota";
}

TEST_P(LibraryBeforeContext, GlobalsThatFitAreChargedOnceAndGivenBackAtTheUnload) {
  Outcome o = run("globals_3x128m.fatbin");
  EXPECT_EQ(o.num("context_code"), 0) << o.out;
  EXPECT_EQ(o.num("launch_code"), 0) << o.out;
  EXPECT_LE(o.num("peak_driver_used"), kGiB + kTolerance);
  // Charged once (384 MiB and constants, the books following the driver's figure to within 2 MiB).
  EXPECT_GE(o.num("later_free"), kGiB - kContextBytes - 386 * kMiB) << "charged twice";
  EXPECT_LE(o.num("later_free"), kGiB - kContextBytes - 384 * kMiB) << "not charged";
  EXPECT_EQ(o.num("unload_code"), 0);
  EXPECT_GE(o.num("unloaded_free"), kGiB - kContextBytes - 2 * kMiB) << "given back at the unload";
}

// A library loaded while a context exists but is not current: the driver loads it into that context
// too (here at its first launch), so the load is charged there and refused when it does not fit.
TEST_F(DriverPaths, ALibraryLoadedBesideAnExistingContextIsChargedThere) {
  Env env = base_env();
  env["GPUSLICE_MEMORY_LIMIT"] = "1Gi";
  env["CUDA_MODULE_LOADING"] = "LAZY";
  Outcome o = probe({"--scenario", "library-first", "--what", "existing", "--image",
                     std::string(GPUSLICE_FIXTURES) + "/globals_3x4g.fatbin"},
                    env);
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_EQ(o.num("context_code"), 0) << o.out;
  EXPECT_EQ(o.num("library_code"), 2) << o.out;
  EXPECT_LE(o.num("peak_driver_used"), kGiB + kTolerance) << "the driver took the globals past the quota";
}

INSTANTIATE_TEST_SUITE_P(Orders, LibraryBeforeContext,
                         ::testing::Combine(::testing::Values("EAGER", "LAZY"),
                                            ::testing::Values("primary")));

TEST_F(DriverPaths, APrimaryContextOnAFurtherDeviceIsSizedByTheFirstAndRefusedWhenItDoesNotFit) {
  Env env = base_env();
  env["CUDA_DEVICE_MEMORY_LIMIT_0"] = "1g";
  env["CUDA_DEVICE_MEMORY_LIMIT_1"] = "32m";  // less than a context (64 MiB)
  Outcome o = probe({"--scenario", "contexts", "--what", "primary"}, env);
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_EQ(o.num("retain_code"), 2) << o.out;
}

TEST_F(DriverPaths, ANewProcessWhoseContextTheContainerCannotHoldIsRefusedBeforeItIsCreated) {
  Env env = base_env();
  env["GPUSLICE_MEMORY_LIMIT"] = "1Gi";
  // The first process measures the context's footprint and holds all but 32 MiB of the quota.
  Background holder(holder_argv(kGiB - kContextBytes - 32 * kMiB), env, dir_ + "/holder.out");
  ASSERT_TRUE(holder.wait_for_output("hold_code=0", 10000)) << holder.output();
  Outcome o = probe({"--scenario", "fill"}, env);
  EXPECT_NE(o.out.find("error=cuDevicePrimaryCtxRetain code=2"), std::string::npos) << o.out << o.err;
}

}  // namespace
}  // namespace gpuslice::test
