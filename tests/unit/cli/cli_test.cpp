// Runs the built gpuslice binary as a user would and checks exit codes, output and its effect on
// a state file created through the Ledger API.
#include <signal.h>

#include "cli_fixture.h"
#include "shared_state/layout.h"

namespace {

using namespace gpuslice::cli_test;
using gpuslice::shm::Ledger;

// ---- arguments ----

TEST_F(CliTest, NoCommandIsAUsageError) {
  Outcome o = run({});
  EXPECT_EQ(o.status, 2);
  EXPECT_TRUE(contains(o.err, "Usage: gpuslice COMMAND")) << o.err;
}

TEST_F(CliTest, UnknownCommandIsAUsageError) {
  Outcome o = run({"frobnicate"});
  EXPECT_EQ(o.status, 2);
  EXPECT_TRUE(contains(o.err, "unknown command 'frobnicate'")) << o.err;
}

TEST_F(CliTest, EveryCommandHasHelp) {
  for (const char* command : {"run", "status", "top", "set", "profile", "mps", "version"}) {
    Outcome o = run({command, "--help"});
    EXPECT_EQ(o.status, 0) << command;
    EXPECT_TRUE(contains(o.out, std::string("Usage: gpuslice ") + command)) << command << ": " << o.out;
    EXPECT_TRUE(o.err.empty()) << command << ": " << o.err;
  }
  EXPECT_EQ(run({"--help"}).status, 0);
  EXPECT_TRUE(contains(run({"help", "set"}).out, "Usage: gpuslice set"));
}

TEST_F(CliTest, UnknownOptionsAreUsageErrorsEverywhere) {
  for (const char* command : {"run", "status", "top", "set", "profile", "mps", "version"}) {
    Outcome o = run({command, "--bogus"});
    EXPECT_EQ(o.status, 2) << command;
    EXPECT_TRUE(contains(o.err, "unknown option '--bogus'")) << command << ": " << o.err;
    EXPECT_TRUE(contains(o.err, std::string("gpuslice ") + command + " --help")) << o.err;
  }
}

TEST_F(CliTest, MissingOrRepeatedOptionValuesAreUsageErrors) {
  Outcome missing = run({"status", "--file"});
  EXPECT_EQ(missing.status, 2);
  EXPECT_TRUE(contains(missing.err, "needs a value")) << missing.err;
  Outcome twice = run({"set", "--memory", "1Gi", "--memory", "2Gi"});
  EXPECT_EQ(twice.status, 2);
  EXPECT_TRUE(contains(twice.err, "given twice")) << twice.err;
  EXPECT_EQ(run({"status", "--json=yes"}).status, 2);
  EXPECT_EQ(run({"status", "extra"}).status, 2);
  EXPECT_EQ(run({"status", "--interval", "1"}).status, 2) << "--interval needs --watch";
  EXPECT_EQ(run({"top", "--interval", "0"}).status, 2);
  EXPECT_EQ(run({"top", "--iterations", "-1"}).status, 2);
}

// ---- run ----

TEST_F(CliTest, RunRejectsMalformedLimits) {
  std::string lib = make_library("libgpuslice.so");
  struct Case {
    std::vector<std::string> args;
    const char* message;
  } cases[] = {
      {{"--memory", "12x"}, "--memory '12x'"},
      {{"--memory", "-1Gi"}, "--memory '-1Gi'"},
      {{"--compute", "150"}, "--compute '150'"},
      {{"--device-limits", "8Gi"}, "not a per-device list"},
      {{"--device-limits", "0=8Gi,0=4Gi"}, "--device-limits"},
      {{"--memory", "1Gi", "--device-limits", "0=1Gi"}, "cannot be combined"},
      {{"--log-level", "loud"}, "--log-level 'loud'"},
      {{"--priority", "urgent"}, "--priority 'urgent'"},
      {{"--memory-guarantee", "lots"}, "--memory-guarantee 'lots'"},
      {{"--memory", "4Gi", "--memory-guarantee", "6Gi"}, "--memory-guarantee '6Gi' is above --memory '4Gi'"},
      {{"--device-limits", "0=8Gi,1=1Gi", "--memory-guarantee", "2Gi"}, "on device 1"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"run", "--library", lib};
    args.insert(args.end(), c.args.begin(), c.args.end());
    args.insert(args.end(), {"--", "true"});
    Outcome o = run(args);
    EXPECT_EQ(o.status, 2) << c.message;
    EXPECT_TRUE(contains(o.err, c.message)) << o.err;
  }
  Outcome no_command = run({"run", "--library", lib, "--memory", "1Gi"});
  EXPECT_EQ(no_command.status, 2);
  EXPECT_TRUE(contains(no_command.err, "no command")) << no_command.err;
}

TEST_F(CliTest, RunPassesTheExitStatusThrough) {
  std::string lib = make_library("libgpuslice.so");
  EXPECT_EQ(run({"run", "--library", lib, "--", "sh", "-c", "exit 7"}).status, 7);
  EXPECT_EQ(run({"run", "--library", lib, "--", "sh", "-c", "exit 0"}).status, 0);
  EXPECT_EQ(run({"run", "--library", lib, "sh", "-c", "exit 42"}).status, 42) << "'--' is optional";
  EXPECT_EQ(run({"run", "--library", lib, "--", "sh", "-c", "kill -TERM $$"}).status, 128 + SIGTERM);
}

TEST_F(CliTest, RunSetsTheEnvironmentAndExecsTheCommand) {
  std::string lib = make_library("libgpuslice.so");
  std::string other = make_library("other.so");
  Outcome o =
      run({"run", "--library", lib, "--memory", "8Gi", "--compute", "30", "--shared-dir", dir_, "--log-level",
           "debug", "--", "sh", "-c",
           "echo \"P=$LD_PRELOAD\"; echo \"M=$GPUSLICE_MEMORY_LIMIT\"; echo \"C=$GPUSLICE_COMPUTE_LIMIT\"; "
           "echo \"D=$GPUSLICE_SHARED_DIR\"; echo \"L=$GPUSLICE_LOG_LEVEL\"; echo \"A=$0 $1\"",
           "first", "second"},
          {"LD_PRELOAD=" + other + ":" + lib});
  EXPECT_EQ(o.status, 0) << o.err;
  EXPECT_TRUE(contains(o.out, "P=" + lib + ":" + other + "\n")) << "ours first, no duplicate: " << o.out;
  EXPECT_TRUE(contains(o.out, "M=8Gi\n")) << o.out;
  EXPECT_TRUE(contains(o.out, "C=30\n")) << o.out;
  EXPECT_TRUE(contains(o.out, "D=" + dir_ + "\n")) << o.out;
  EXPECT_TRUE(contains(o.out, "L=debug\n")) << o.out;
  EXPECT_TRUE(contains(o.out, "A=first second\n")) << o.out;
}

TEST_F(CliTest, RunPriorityBecomesTheVariable) {
  std::string lib = make_library("libgpuslice.so");
  Outcome o =
      run({"run", "--library", lib, "--priority", "high", "--", "sh", "-c", "echo \"$GPUSLICE_PRIORITY\""});
  EXPECT_EQ(o.status, 0) << o.err;
  EXPECT_EQ(o.out, "high\n");
}

TEST_F(CliTest, RunDeviceLimitsBecomeThePerDeviceForm) {
  std::string lib = make_library("libgpuslice.so");
  Outcome o = run({"run", "--library", lib, "--device-limits", "0=8Gi,1=4Gi", "--compute", "0=30,1=50", "--",
                   "sh", "-c", "echo \"$GPUSLICE_MEMORY_LIMIT|$GPUSLICE_COMPUTE_LIMIT\""});
  EXPECT_EQ(o.status, 0) << o.err;
  EXPECT_EQ(o.out, "0=8Gi,1=4Gi|0=30,1=50\n");
}

TEST_F(CliTest, RunMemoryGuaranteeBecomesTheVariable) {
  std::string lib = make_library("libgpuslice.so");
  Outcome o = run({"run", "--library", lib, "--memory", "8Gi", "--memory-guarantee", "0=2Gi,1=8Gi", "--",
                   "sh", "-c", "echo \"$GPUSLICE_MEMORY_LIMIT|$GPUSLICE_MEMORY_GUARANTEE\""});
  EXPECT_EQ(o.status, 0) << o.err;
  EXPECT_EQ(o.out, "8Gi|0=2Gi,1=8Gi\n");
  Outcome alone = run({"run", "--library", lib, "--memory-guarantee", "1Gi", "--", "sh", "-c",
                       "echo \"$GPUSLICE_MEMORY_GUARANTEE\""});
  EXPECT_EQ(alone.status, 0) << alone.err;
  EXPECT_EQ(alone.out, "1Gi\n") << "without --memory the library checks it against the limit it finds";
}

TEST_F(CliTest, RunFindsTheLibraryThroughTheEnvironment) {
  std::string lib = make_library("libgpuslice.so");
  Outcome o = run({"run", "--", "sh", "-c", "echo \"$LD_PRELOAD\""}, {"GPUSLICE_LIBRARY=" + lib});
  EXPECT_EQ(o.status, 0) << o.err;
  EXPECT_EQ(o.out, lib + "\n");
}

TEST_F(CliTest, RunWithoutALibraryIsARuntimeError) {
  Outcome o = run({"run", "--library", dir_ + "/missing.so", "--", "true"});
  EXPECT_EQ(o.status, 1);
  EXPECT_TRUE(contains(o.err, dir_ + "/missing.so")) << o.err;
  Outcome env = run({"run", "--", "true"}, {"GPUSLICE_LIBRARY=" + dir_ + "/nope.so"});
  EXPECT_EQ(env.status, 1);
  EXPECT_TRUE(contains(env.err, "GPUSLICE_LIBRARY")) << env.err;
}

TEST_F(CliTest, RunOfAMissingCommandExits127) {
  std::string lib = make_library("libgpuslice.so");
  Outcome o = run({"run", "--library", lib, "--", "gpuslice-no-such-command-xyz"});
  EXPECT_EQ(o.status, 127);
  EXPECT_TRUE(contains(o.err, "gpuslice-no-such-command-xyz: command not found")) << o.err;
  std::string data = make_empty_file("data.txt");
  Outcome not_executable = run({"run", "--library", lib, "--", data});
  EXPECT_EQ(not_executable.status, 126);
}

// ---- status / top ----

TEST_F(CliTest, StatusJsonDescribesTheLedger) {
  auto ledger = make_state();
  ASSERT_TRUE(ledger->try_reserve(0, 3 * kGi));
  ASSERT_TRUE(ledger->try_reserve(1, 1024));
  ledger->add_busy_ns(0, 500);
  ledger->count_refusal(0);
  ledger->set_host_pid(77777);
  Outcome o = run({"status", "--json", "--shared-dir", dir_});
  ASSERT_EQ(o.status, 0) << o.err;
#ifdef GPUSLICE_TEST_HAVE_JSON
  auto doc = nlohmann::json::parse(o.out);
  EXPECT_EQ(doc["path"], state_);
  EXPECT_EQ(doc["layout_version"], gpuslice::shm::layout::kLayoutVersion);
  ASSERT_EQ(doc["devices"].size(), 2u);
  const auto& d0 = doc["devices"][0];
  EXPECT_EQ(d0["record"], 0);
  EXPECT_EQ(d0["cuda_index"], 0);
  EXPECT_EQ(d0["uuid"], kUuid0);
  EXPECT_EQ(d0["quota_bytes"], 8 * kGi);
  EXPECT_EQ(d0["used_bytes"], 3 * kGi);
  EXPECT_EQ(d0["total_bytes"], 80 * kGi);
  EXPECT_EQ(d0["compute_limit_percent"], 30);
  EXPECT_EQ(d0["refused_allocations"], 1);
  const auto& d1 = doc["devices"][1];
  EXPECT_TRUE(d1["quota_bytes"].is_null()) << "unlimited is null";
  EXPECT_TRUE(d1["compute_limit_percent"].is_null());
  EXPECT_EQ(d1["used_bytes"], 1024);
  ASSERT_EQ(doc["processes"].size(), 1u);
  const auto& p = doc["processes"][0];
  EXPECT_EQ(p["pid"], getpid());
  EXPECT_EQ(p["host_pid"], 77777);
  EXPECT_TRUE(contains(p["command"].get<std::string>(), "cli_tests"));
  ASSERT_EQ(p["devices"].size(), 2u);
  EXPECT_EQ(p["devices"][0]["used_bytes"], 3 * kGi);
  EXPECT_EQ(p["devices"][0]["busy_ns"], 500);
  EXPECT_EQ(p["devices"][0]["compute_share"], 1.0);
  EXPECT_TRUE(p["devices"][1]["compute_share"].is_null());
#else
  EXPECT_TRUE(contains(o.out, "\"used_bytes\":" + std::to_string(3 * kGi))) << o.out;
  EXPECT_TRUE(contains(o.out, "\"pid\":" + std::to_string(getpid()))) << o.out;
#endif
}

TEST_F(CliTest, StatusTableShowsDevicesAndProcesses) {
  auto ledger = make_state();
  ASSERT_TRUE(ledger->try_reserve(0, 2 * kGi));
  Outcome o = run({"status", "--file", state_});
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_TRUE(contains(o.out, "State file: " + state_)) << o.out;
  EXPECT_TRUE(contains(o.out, kUuid0)) << o.out;
  EXPECT_TRUE(contains(o.out, "8 GiB")) << o.out;
  EXPECT_TRUE(contains(o.out, "2 GiB")) << o.out;
  EXPECT_TRUE(contains(o.out, "25%")) << o.out;
  EXPECT_TRUE(contains(o.out, "unlimited")) << o.out;
  EXPECT_TRUE(contains(o.out, std::to_string(getpid()))) << o.out;
  EXPECT_TRUE(contains(o.out, "cli_tests")) << o.out;
}

TEST_F(CliTest, StatusShowsTheGuaranteeBesideTheQuota) {
  auto ledger = make_state();
  ledger->set_guarantee(0, 2 * kGi);
  ledger->set_caps(1, {gpuslice::shm::kUnlimited, gpuslice::shm::kNoComputeLimit, 3 * kGi});
  Outcome o = run({"status", "--file", state_});
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_TRUE(contains(o.out, "GUARANTEE")) << o.out;
  const std::size_t row0 = o.out.find(kUuid0);
  ASSERT_NE(row0, std::string::npos) << o.out;
  const std::string line0 = o.out.substr(row0, o.out.find('\n', row0) - row0);
  EXPECT_TRUE(contains(line0, "8 GiB      2 GiB")) << "quota, then guarantee: " << line0;
  Outcome json = run({"status", "--json", "--file", state_});
  ASSERT_EQ(json.status, 0) << json.err;
#ifdef GPUSLICE_TEST_HAVE_JSON
  auto doc = nlohmann::json::parse(json.out);
  EXPECT_EQ(doc["devices"][0]["guarantee_bytes"], 2 * kGi);
  EXPECT_EQ(doc["devices"][1]["guarantee_bytes"], 3 * kGi) << "the operator's guarantee when none is asked";
#else
  EXPECT_TRUE(contains(json.out, "\"guarantee_bytes\":" + std::to_string(2 * kGi))) << json.out;
#endif
  ledger->set_guarantee(0, 0);
  Outcome none = run({"status", "--file", state_});
  EXPECT_TRUE(contains(none.out, "none")) << none.out;
}

TEST_F(CliTest, StatusFindsTheFileThroughTheEnvironment) {
  auto ledger = make_state();
  Outcome by_dir = run({"status", "--json"}, {"GPUSLICE_SHARED_DIR=" + dir_});
  EXPECT_EQ(by_dir.status, 0) << by_dir.err;
  EXPECT_TRUE(contains(by_dir.out, kUuid0));
  Outcome by_hami = run({"status", "--json"}, {"CUDA_DEVICE_MEMORY_SHARED_CACHE=" + state_});
  EXPECT_EQ(by_hami.status, 0) << by_hami.err;
  EXPECT_TRUE(contains(by_hami.out, kUuid0));
  Outcome native_wins = run({"status"}, {"GPUSLICE_SHARED_DIR=" + dir_ + "/elsewhere",
                                         "CUDA_DEVICE_MEMORY_SHARED_CACHE=" + state_});
  EXPECT_EQ(native_wins.status, 1);
  EXPECT_TRUE(contains(native_wins.err, dir_ + "/elsewhere/state")) << native_wins.err;
}

TEST_F(CliTest, StatusOfAMissingOrDamagedFileNamesIt) {
  Outcome missing = run({"status", "--shared-dir", dir_});
  EXPECT_EQ(missing.status, 1);
  EXPECT_TRUE(contains(missing.err, state_)) << missing.err;
  EXPECT_TRUE(contains(missing.err, "no state file")) << missing.err;
  std::ofstream(state_) << "definitely not a state file\n";
  Outcome foreign = run({"status", "--shared-dir", dir_});
  EXPECT_EQ(foreign.status, 1);
  EXPECT_TRUE(contains(foreign.err, state_)) << foreign.err;
  EXPECT_TRUE(contains(foreign.err, "not a gpuslice state file")) << foreign.err;
}

TEST_F(CliTest, StatusReapsProcessesThatDied) {
  auto ledger = make_state();
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto mine = Ledger::open(state_, Ledger::Mode::Process);
    char ok = mine.ok() && mine.value()->try_reserve(0, kGi) ? '1' : '0';
    ssize_t ignored = write(ready[1], &ok, 1);
    (void)ignored;
    for (;;) pause();
  }
  char ok = 0;
  ASSERT_EQ(read(ready[0], &ok, 1), 1);
  ASSERT_EQ(ok, '1');
  close(ready[0]);
  close(ready[1]);
  EXPECT_EQ(ledger->used(0), kGi);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  Outcome o = run({"status", "--json", "--shared-dir", dir_});
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_FALSE(contains(o.out, "\"pid\":" + std::to_string(child))) << o.out;
  EXPECT_EQ(ledger->used(0), 0u) << "the CLI returned the dead child's bytes";
}

TEST_F(CliTest, WatchRefreshesTheRequestedNumberOfTimes) {
  auto ledger = make_state();
  Outcome o =
      run({"status", "--watch", "--json", "--interval", "0.01", "--iterations", "3", "--file", state_});
  ASSERT_EQ(o.status, 0) << o.err;
  std::istringstream lines(o.out);
  std::string line;
  int documents = 0;
  while (std::getline(lines, line)) {
    EXPECT_EQ(line.front(), '{');
    ++documents;
  }
  EXPECT_EQ(documents, 3);
}

TEST_F(CliTest, TopExitsCleanlyOnInterrupt) {
  auto ledger = make_state();
  std::string out_path = dir_ + "/top.out", err_path = dir_ + "/top.err";
  pid_t pid = spawn({"top", "--interval", "0.05", "--shared-dir", dir_}, {}, out_path, err_path);
  ASSERT_GT(pid, 0);
  // Wait (boundedly) until it has drawn once, so the signal lands in the refresh loop.
  for (int i = 0; i < 1000 && read_file(out_path).find("State file") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGINT);
  EXPECT_EQ(wait_status(pid), 0) << read_file(err_path);
  EXPECT_TRUE(contains(read_file(out_path), kUuid0));
}

// ---- set ----

TEST_F(CliTest, SetChangesTheQuotaOfOneDevice) {
  auto ledger = make_state();
  Outcome o = run({"set", "--memory", "1Gi", "--device", "0", "--shared-dir", dir_});
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_EQ(ledger->quota(0), kGi);
  EXPECT_EQ(ledger->quota(1), gpuslice::shm::kUnlimited) << "other devices are untouched";
  EXPECT_TRUE(contains(o.out, "memory quota 8 GiB -> 1 GiB")) << o.out;
  EXPECT_TRUE(ledger->try_reserve(0, kGi));
  EXPECT_FALSE(ledger->try_reserve(0, 1)) << "the running process obeys the new quota at once";
}

TEST_F(CliTest, SetChangesComputeOfAllDevicesAndAcceptsUuidsAndKeywords) {
  auto ledger = make_state();
  ASSERT_EQ(run({"set", "--compute", "40", "--file", state_}).status, 0);
  EXPECT_EQ(ledger->compute_limit(0), 40u);
  EXPECT_EQ(ledger->compute_limit(1), 40u);
  ASSERT_EQ(run({"set", "--device", kUuid1, "--compute", "none", "--memory", "2Gi", "--file", state_}).status,
            0);
  EXPECT_EQ(ledger->compute_limit(1), gpuslice::shm::kNoComputeLimit);
  EXPECT_EQ(ledger->quota(1), 2 * kGi);
  EXPECT_EQ(ledger->compute_limit(0), 40u);
  ASSERT_EQ(run({"set", "--memory", "unlimited", "--device", "1", "--file", state_}).status, 0);
  EXPECT_EQ(ledger->quota(1), gpuslice::shm::kUnlimited);
}

TEST_F(CliTest, SetBelowCurrentUseRefusesNewAllocationsButFreesNothing) {
  auto ledger = make_state();
  ASSERT_TRUE(ledger->try_reserve(0, 4 * kGi));
  Outcome o = run({"set", "--memory", "1Gi", "--device", "0", "--file", state_});
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_TRUE(contains(o.out, "above the new quota")) << o.out;
  EXPECT_EQ(ledger->used(0), 4 * kGi);
  EXPECT_FALSE(ledger->try_reserve(0, 1));
}

TEST_F(CliTest, SetRejectsBadRequests) {
  auto ledger = make_state();
  EXPECT_EQ(run({"set", "--file", state_}).status, 2);
  EXPECT_EQ(run({"set", "--memory", "lots", "--file", state_}).status, 2);
  EXPECT_EQ(run({"set", "--compute", "0", "--file", state_}).status, 2);
  EXPECT_EQ(run({"set", "--compute", "101", "--file", state_}).status, 2);
  Outcome no_device = run({"set", "--compute", "50", "--device", "9", "--file", state_});
  EXPECT_EQ(no_device.status, 1);
  EXPECT_TRUE(contains(no_device.err, "no device '9'")) << no_device.err;
  Outcome no_file = run({"set", "--compute", "50", "--file", dir_ + "/absent"});
  EXPECT_EQ(no_file.status, 1);
  EXPECT_TRUE(contains(no_file.err, dir_ + "/absent")) << no_file.err;
  EXPECT_EQ(ledger->compute_limit(0), 30u) << "nothing changed";
}

// The state file keeps what `set` asks for and the limits file's cap apart (the cap is put there by
// every process of the container): the smaller applies, so `set` can neither raise a cap nor be
// undone when the cap is rewritten.
TEST_F(CliTest, SetAboveTheFileCapIsKeptButTheCapStillApplies) {
  auto ledger = make_state();
  ledger->set_caps(0, {2 * kGi, 50});
  Outcome raise = run({"set", "--memory", "4Gi", "--compute", "none", "--device", "0", "--file", state_});
  ASSERT_EQ(raise.status, 3) << "the cap holds both requests: " << raise.err;
  EXPECT_TRUE(contains(raise.err, "holds 2 of the limits asked for")) << raise.err;
  EXPECT_TRUE(contains(
      raise.out,
      "memory quota 2 GiB -> 2 GiB (requested 4 GiB; the container's cap is 2 GiB, so 2 GiB stays enforced)"))
      << raise.out;
  EXPECT_TRUE(contains(
      raise.out,
      "compute limit 30% -> 50% (requested none; the container's cap is 50%, so 50% stays enforced)"))
      << raise.out;
  EXPECT_EQ(ledger->quota(0), 2 * kGi);
  EXPECT_EQ(ledger->compute_limit(0), 50u);
  ASSERT_EQ(run({"set", "--memory", "1Gi", "--device", "0", "--file", state_}).status, 0);
  EXPECT_EQ(ledger->quota(0), kGi);
  ledger->set_caps(0, {3 * kGi, 50});  // the operator rewrites the file
  EXPECT_EQ(ledger->quota(0), kGi) << "a rewritten cap does not undo the request";
  ledger->set_caps(0, {});
  EXPECT_EQ(ledger->quota(0), kGi);
  EXPECT_EQ(ledger->compute_limit(0), gpuslice::shm::kNoComputeLimit);
}

// What was found (8): `gpuslice set --priority high` above the operator's assignment exited 0 and
// status showed `high` while the container ran at `normal`. It says the level it runs at and exits
// 3, as a capped --memory does; status shows the assignment, and a refused one.
TEST_F(CliTest, SetPriorityAboveTheAssignmentSaysTheLevelItRunsAtAndExitsNonZero) {
  auto ledger = make_state();
  ledger->note_assignment(gpuslice::Priority::Normal, false);  // what the container's watcher read
  Outcome raise = run({"set", "--priority", "high", "--file", state_});
  ASSERT_EQ(raise.status, 3) << raise.out << raise.err;
  EXPECT_TRUE(contains(raise.out, "(the operator assigned normal, so it runs at normal)")) << raise.out;
  EXPECT_TRUE(contains(raise.err, "assignment holds the priority")) << raise.err;
  EXPECT_EQ(run({"set", "--priority", "low", "--file", state_}).status, 0) << "lowering is always granted";
  Outcome status = run({"status", "--file", state_});
  EXPECT_TRUE(contains(status.out, "Assigned priority: normal")) << status.out;
  ledger->note_assignment(gpuslice::Priority::Low, true);
  status = run({"status", "--file", state_});
  EXPECT_TRUE(contains(status.out, "Assignment: REFUSED")) << status.out;
}

// ---- profile ----

TEST_F(CliTest, ProfileSummarisesAndReportsMalformedLines) {
  std::ofstream(dir_ + "/metrics.log") << "name:cuLaunchKernel\ncount:4\nburst:4000\n"
                                          "name:cuMemAlloc\ncount:2\nburst:10000\n"
                                          "garbage line\n"
                                          "count:notanumber\n"
                                          "name:cuMemFree count:1 burst:50\n";
  std::ofstream(dir_ + "/timeline.log") << "name:cuLaunchKernel start:1 burst:500\n"
                                           "name:cuLaunchKernel start:2 burst:1000\n"
                                           "name:cuLaunchKernel start:3 burst:1500\n"
                                           "name:cuLaunchKernel start:4 burst:1000\n"
                                           "name:cuLaunchKernel start:x burst:1\n"
                                           "name:cuInit start:5 burst:300000\n";
  Outcome o = run({"profile", "--json", dir_});
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_TRUE(contains(o.err, dir_ + "/metrics.log:7:")) << o.err;
  EXPECT_TRUE(contains(o.err, dir_ + "/metrics.log:8:")) << o.err;
  EXPECT_TRUE(contains(o.err, dir_ + "/timeline.log:5:")) << o.err;
  EXPECT_TRUE(contains(o.err, "3 malformed lines skipped")) << o.err;
#ifdef GPUSLICE_TEST_HAVE_JSON
  auto doc = nlohmann::json::parse(o.out);
  EXPECT_EQ(doc["malformed_lines"], 3);
  const auto& apis = doc["apis"];
  ASSERT_EQ(apis.size(), 4u);
  EXPECT_EQ(apis[0]["api"], "cuInit");  // sorted by total time
  EXPECT_EQ(apis[0]["count"], 1);
  EXPECT_EQ(apis[1]["api"], "cuMemAlloc");
  EXPECT_EQ(apis[1]["mean_ns"], 5000.0);
  EXPECT_TRUE(apis[1]["p50_ns"].is_null()) << "no timeline for it";
  EXPECT_EQ(apis[2]["api"], "cuLaunchKernel");
  EXPECT_EQ(apis[2]["count"], 4);
  EXPECT_EQ(apis[2]["total_ns"], 4000);
  EXPECT_EQ(apis[2]["p50_ns"], 1000);
  EXPECT_EQ(apis[2]["p99_ns"], 1500);
  EXPECT_EQ(apis[3]["api"], "cuMemFree");
#endif
  Outcome table = run({"profile", dir_});
  ASSERT_EQ(table.status, 0);
  std::size_t init = table.out.find("cuInit"), alloc = table.out.find("cuMemAlloc"),
              launch = table.out.find("cuLaunchKernel"), free_row = table.out.find("cuMemFree");
  ASSERT_NE(free_row, std::string::npos) << table.out;
  EXPECT_LT(init, alloc);
  EXPECT_LT(alloc, launch);
  EXPECT_LT(launch, free_row);
  EXPECT_TRUE(contains(table.out, "300 us")) << table.out;
}

TEST_F(CliTest, ProfileNeedsADirectoryWithFiles) {
  EXPECT_EQ(run({"profile"}).status, 2);
  Outcome empty = run({"profile", dir_});
  EXPECT_EQ(empty.status, 1);
  EXPECT_TRUE(contains(empty.err, dir_)) << empty.err;
}

TEST_F(CliTest, VersionPrintsTheVersion) {
  Outcome o = run({"version"});
  EXPECT_EQ(o.status, 0);
  EXPECT_TRUE(contains(o.out, "gpuslice 0.")) << o.out;
  EXPECT_TRUE(contains(o.out, "layout " + std::to_string(gpuslice::shm::layout::kLayoutVersion))) << o.out;
}

}  // namespace
