// End to end: what the views say about memory is what the container holds. Use without a memory
// quota, a second `run` with another quota, `set` under a cap, and memory shared between processes
// (CUDA IPC, shareable VMM handles) on the simulated driver, under the real libgpuslice.so.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "process.h"

namespace gpuslice::test {
namespace {

constexpr long long kMiB = 1LL << 20;
constexpr long long kGiB = 1LL << 30;
constexpr long long kContextBytes = 64 * kMiB;  // what the mock driver charges per context

class Accounting : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir("gpuslice-acct-");
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override { remove_tree(dir_); }

  Env base_env(bool preload = true) const {
    return mock_container_env(dir_, 1, kContextBytes, GPUSLICE_MOCK_DIR,
                              preload ? GPUSLICE_PRELOAD : nullptr);
  }

  // The host's view: no preload and no limits file (the CLI learns the cap from the state file).
  Env host_env() const {
    Env env = base_env(false);
    env.erase("GPUSLICE_LIMITS_FILE");
    return env;
  }

  std::vector<std::string> probe_argv(const std::vector<std::string>& args) const {
    std::vector<std::string> argv{GPUSLICE_PROBE_APP};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }

  std::vector<std::string> holder_argv(long long bytes) const {
    return probe_argv({"--scenario", "hold", "--bytes", std::to_string(bytes), "--seconds", "20"});
  }

  Outcome status_json() const {
    return run({GPUSLICE_CLI, "status", "--json", "--shared-dir", dir_ + "/shared"}, host_env());
  }

  // Polls `gpuslice status --json` until it contains `needle` (the watcher books every 500 ms).
  bool status_shows(const std::string& needle, int timeout_ms, std::string* last) const {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    do {
      Outcome o = status_json();
      *last = o.out + o.err;
      if (o.exit_code == 0 && o.out.find(needle) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    } while (std::chrono::steady_clock::now() < deadline);
    return false;
  }

  void write_limits(const std::string& text) const {
    std::ofstream limits(dir_ + "/limits");
    limits << text;
  }

  std::string dir_;
};

std::string field(const char* name, long long value) {
  return std::string("\"") + name + "\":" + std::to_string(value);
}

// Item: honest numbers. A compute limit alone attaches the device without a memory quota: its
// allocations are not tracked one by one, yet status must show what the process holds, not 0 B.
TEST_F(Accounting, AProcessWithoutAMemoryQuotaShowsItsRealUseInStatus) {
  Env env = base_env();
  env["GPUSLICE_COMPUTE_LIMIT"] = "50";
  Background holder(holder_argv(kGiB), env, dir_ + "/holder.out");
  ASSERT_TRUE(holder.wait_for_output("hold_code=0", 10000)) << holder.output();
  std::string last;
  EXPECT_TRUE(status_shows(field("used_bytes", kGiB + kContextBytes), 5000, &last)) << last;
  EXPECT_NE(last.find("\"quota_bytes\":null"), std::string::npos) << last;
}

// Where NVML cannot say what the process holds (here: no libnvidia-ml at all), its allocations are
// counted one by one instead: the books hold them, never a false 0.
TEST_F(Accounting, AProcessNvmlCannotSeeIsCountedAllocationByAllocation) {
  const std::string driver_only = dir_ + "/driver-only";
  ASSERT_TRUE(std::filesystem::create_directories(driver_only));
  std::filesystem::create_symlink(std::string(GPUSLICE_MOCK_DIR) + "/libcuda.so.1",
                                  driver_only + "/libcuda.so.1");
  Env env = base_env();
  env["LD_LIBRARY_PATH"] = driver_only;
  env["GPUSLICE_COMPUTE_LIMIT"] = "50";
  Background holder(holder_argv(kGiB), env, dir_ + "/holder.out");
  ASSERT_TRUE(holder.wait_for_output("hold_code=0", 10000)) << holder.output();
  std::string last;
  EXPECT_TRUE(status_shows(field("used_bytes", kGiB), 3000, &last)) << last;
}

TEST_F(Accounting, RunRefusesAMemoryQuotaOtherThanTheRunningContainers) {
  Env env = base_env();
  env["GPUSLICE_MEMORY_LIMIT"] = "1Gi";
  Background holder(holder_argv(128 * kMiB), env, dir_ + "/holder.out");
  ASSERT_TRUE(holder.wait_for_output("hold_code=0", 10000)) << holder.output();
  auto cli_run = [&](const char* memory) {
    return run({GPUSLICE_CLI, "run", "--library", GPUSLICE_PRELOAD, "--memory", memory, "--shared-dir",
                dir_ + "/shared", "--", GPUSLICE_PROBE_APP, "--scenario", "fill"},
               base_env(false));
  };
  Outcome bigger = cli_run("2Gi");
  EXPECT_EQ(bigger.exit_code, 1) << bigger.out << bigger.err;
  EXPECT_FALSE(bigger.has("total")) << "the command must not start";
  EXPECT_NE(bigger.err.find("memory quota of 1 GiB"), std::string::npos) << bigger.err;
  EXPECT_NE(bigger.err.find("gpuslice set --memory"), std::string::npos) << bigger.err;
  // A smaller one would tighten the quota of the running processes behind their back.
  Outcome smaller = cli_run("512Mi");
  EXPECT_EQ(smaller.exit_code, 1) << smaller.out << smaller.err;
  Outcome per_device = run({GPUSLICE_CLI, "run", "--library", GPUSLICE_PRELOAD, "--device-limits", "0=2Gi",
                            "--shared-dir", dir_ + "/shared", "--", GPUSLICE_PROBE_APP, "--scenario", "fill"},
                           base_env(false));
  EXPECT_EQ(per_device.exit_code, 1) << per_device.out << per_device.err;
  Outcome same = cli_run("1Gi");
  ASSERT_EQ(same.exit_code, 0) << same.out << same.err;
  EXPECT_EQ(same.num("total"), kGiB);
  // Once the container's processes are gone its state is nobody's: the new run gets its quota.
  holder.kill(SIGKILL);
  holder.wait();
  Outcome later = cli_run("2Gi");
  ASSERT_EQ(later.exit_code, 0) << later.out << later.err;
  EXPECT_EQ(later.num("total"), 2 * kGiB);
}

// Without the CLI (the variable set directly) the process cannot be refused, but it says which
// quota applies instead of the one it asked for.
TEST_F(Accounting, AProcessAskingForAnotherQuotaThanItsContainerSaysWhichOneApplies) {
  Env env = base_env();
  env["GPUSLICE_MEMORY_LIMIT"] = "1Gi";
  Background holder(holder_argv(128 * kMiB), env, dir_ + "/holder.out");
  ASSERT_TRUE(holder.wait_for_output("hold_code=0", 10000)) << holder.output();
  env["GPUSLICE_MEMORY_LIMIT"] = "2Gi";
  Outcome o = run(probe_argv({"--scenario", "fill"}), env);
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_EQ(o.num("total"), kGiB);
  EXPECT_NE(o.err.find("asks for a memory quota of " + std::to_string(2 * kGiB)), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("the container's applies"), std::string::npos) << o.err;
}

TEST_F(Accounting, SetFromTheHostSaysTheCapKeepsTheQuotaAndStatusShowsAllThree) {
  write_limits("GPUSLICE_MEMORY_LIMIT=3Gi\n");
  Env env = base_env();
  env["GPUSLICE_MEMORY_LIMIT"] = "8Gi";
  Background holder(holder_argv(128 * kMiB), env, dir_ + "/holder.out");
  ASSERT_TRUE(holder.wait_for_output("hold_code=0", 10000)) << holder.output();
  Outcome set = run({GPUSLICE_CLI, "set", "--shared-dir", dir_ + "/shared", "--memory", "6Gi"}, host_env());
  ASSERT_EQ(set.exit_code, 3) << "the cap holds the request: " << set.out << set.err;
  EXPECT_NE(set.out.find("memory quota 3 GiB -> 3 GiB"), std::string::npos) << set.out;
  EXPECT_NE(set.out.find("requested 6 GiB; the container's cap is 3 GiB, so 3 GiB stays enforced"),
            std::string::npos)
      << set.out;
  Outcome status = status_json();
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_NE(status.out.find(field("quota_bytes", 3 * kGiB)), std::string::npos) << status.out;
  EXPECT_NE(status.out.find(field("requested_quota_bytes", 6 * kGiB)), std::string::npos) << status.out;
  EXPECT_NE(status.out.find(field("quota_cap_bytes", 3 * kGiB)), std::string::npos) << status.out;
  Outcome text = run({GPUSLICE_CLI, "status", "--shared-dir", dir_ + "/shared"}, host_env());
  EXPECT_NE(text.out.find("requested 6 GiB, capped to 3 GiB"), std::string::npos) << text.out;
  EXPECT_TRUE(holder.wait_for_output("live_total=" + std::to_string(3 * kGiB), 2000)) << holder.output();
}

// Memory shared between processes is charged once, to the process that allocated it: the importer
// (another container here, with a quota smaller than what it opens) is charged nothing, and its
// close or release gives back nothing of its own books. vLLM's custom all-reduce shares its
// buffers this way.
class SharedMemory : public Accounting {
 protected:
  Env container(const char* name, const char* quota) const {
    Env env = base_env();
    env["GPUSLICE_SHARED_DIR"] = dir_ + "/" + name;
    env["GPUSLICE_MEMORY_LIMIT"] = quota;
    return env;
  }
  std::vector<std::string> exporter_argv(const char* scenario, long long bytes) const {
    return probe_argv({"--scenario", scenario, "--bytes", std::to_string(bytes), "--seconds", "20",
                       "--release-trigger", dir_ + "/release"});
  }
  // The exporter's free memory once it holds `held` bytes besides its context, under a 4 GiB quota.
  static std::string exporter_free(long long held) {
    return "live_free=" + std::to_string(4 * kGiB - kContextBytes - held);
  }
  // The exporter's latest complete live_free line (it may be writing the next one).
  static std::string last_live_free(const Background& exporter) {
    std::string out = exporter.output();
    out.erase(out.rfind('\n') + 1);
    return "live_free=" + parse_values(out)["live_free"];
  }
  void open_in_the_same_container(bool driver_counts_importer);
  void release_and_expect_books_back_to_the_context(Background& exporter) const {
    std::ofstream(dir_ + "/release") << "now";
    ASSERT_TRUE(exporter.wait_for_output("freed_code=0", 3000)) << exporter.output();
    EXPECT_TRUE(exporter.wait_for_output(exporter_free(0), 3000)) << exporter.output();
    Outcome status = run({GPUSLICE_CLI, "status", "--json", "--shared-dir", dir_ + "/exporter"}, host_env());
    EXPECT_NE(status.out.find(field("used_bytes", kContextBytes)), std::string::npos) << status.out;
  }
};

TEST_F(SharedMemory, AnIpcHandleIsChargedOnceToItsExporterNeverToTheImporter) {
  Background exporter(exporter_argv("ipc-export", 2 * kGiB), container("exporter", "4Gi"),
                      dir_ + "/exporter.out");
  ASSERT_TRUE(exporter.wait_for_output("ipc_handle=", 10000)) << exporter.output();
  ASSERT_TRUE(exporter.wait_for_output(exporter_free(2 * kGiB), 3000)) << exporter.output();
  std::string handle = parse_values(exporter.output())["ipc_handle"];
  Outcome importer =
      run(probe_argv({"--scenario", "ipc-import", "--ipc-handle", handle}), container("importer", "1Gi"));
  ASSERT_EQ(importer.exit_code, 0) << importer.out << importer.err;
  EXPECT_EQ(importer.num("open_code"), 0) << "2 GiB opened under a 1 GiB quota";
  EXPECT_EQ(importer.num("read_back"), 1);
  EXPECT_EQ(importer.num("before_free"), kGiB - kContextBytes);
  EXPECT_EQ(importer.num("opened_free"), kGiB - kContextBytes) << "the importer is not charged";
  EXPECT_EQ(importer.num("closed_free"), kGiB - kContextBytes) << "closing gives back nothing";
  // Charged once, and still charged after the importer closed it.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // a few more live lines
  EXPECT_EQ(last_live_free(exporter), exporter_free(2 * kGiB)) << exporter.output();
  release_and_expect_books_back_to_the_context(exporter);
}

// vLLM's custom all-reduce: the ranks of one container open each other's buffers. One quota, so
// charging the importer as well would count each buffer twice.
void SharedMemory::open_in_the_same_container(bool driver_counts_importer) {
  Background exporter(exporter_argv("ipc-export", 2 * kGiB), container("exporter", "6Gi"),
                      dir_ + "/exporter.out");
  ASSERT_TRUE(exporter.wait_for_output("ipc_handle=", 10000)) << exporter.output();
  std::string handle = parse_values(exporter.output())["ipc_handle"];
  Env env = container("exporter", "6Gi");
  if (driver_counts_importer) env["GPUSLICE_MOCK_IPC_COUNTS_IMPORTER"] = "1";
  Outcome importer = run(probe_argv({"--scenario", "ipc-import", "--ipc-handle", handle}), env);
  ASSERT_EQ(importer.exit_code, 0) << importer.out << importer.err;
  EXPECT_EQ(importer.num("open_code"), 0);
  // Room for a second copy: a double count would show, not be refused. The importer reads its
  // books after a footprint reconciliation.
  const long long once = 6 * kGiB - 2 * kGiB - 2 * kContextBytes;
  EXPECT_EQ(importer.num("before_free"), once);
  EXPECT_EQ(importer.num("opened_free"), once) << "the buffer is in the container's books once";
  EXPECT_EQ(importer.num("closed_free"), once);
  std::ofstream(dir_ + "/release") << "now";
  ASSERT_TRUE(exporter.wait_for_output("freed_code=0", 3000)) << exporter.output();
  EXPECT_TRUE(exporter.wait_for_output("live_free=" + std::to_string(6 * kGiB - kContextBytes), 3000))
      << exporter.output();
}

TEST_F(SharedMemory, AnIpcHandleOpenedInTheSameContainerIsCountedOnce) { open_in_the_same_container(false); }

// A driver may also count what a process opened in that process's own figure (NVML), which the
// footprint reconciliation charges: the growth seen at open is left out until close.
TEST_F(SharedMemory, AnIpcBufferTheDriverAlsoCountsForTheImporterIsStillCountedOnce) {
  open_in_the_same_container(true);
}

TEST_F(SharedMemory, AnImportedVmmHandleIsChargedOnceToItsCreatorNeverToTheImporter) {
  Background exporter(exporter_argv("vmm-export", 2 * kGiB), container("exporter", "4Gi"),
                      dir_ + "/exporter.out");
  ASSERT_TRUE(exporter.wait_for_output("share_fd=", 10000)) << exporter.output();
  ASSERT_TRUE(exporter.wait_for_output(exporter_free(2 * kGiB), 3000)) << exporter.output();
  std::string fd = parse_values(exporter.output())["share_fd"];
  Outcome importer = run(probe_argv({"--scenario", "vmm-import", "--bytes", std::to_string(2 * kGiB),
                                     "--share-pid", std::to_string(exporter.pid()), "--share-fd", fd}),
                         container("importer", "1Gi"));
  ASSERT_EQ(importer.exit_code, 0) << importer.out << importer.err;
  EXPECT_EQ(importer.num("import_code"), 0);
  EXPECT_EQ(importer.num("map_code"), 0) << "2 GiB mapped under a 1 GiB quota";
  EXPECT_EQ(importer.num("access_code"), 0);
  EXPECT_EQ(importer.num("before_free"), kGiB - kContextBytes);
  EXPECT_EQ(importer.num("imported_free"), kGiB - kContextBytes) << "importing charges nothing";
  EXPECT_EQ(importer.num("mapped_free"), kGiB - kContextBytes) << "mapping charges nothing";
  EXPECT_EQ(importer.num("release_code"), 0);
  EXPECT_EQ(importer.num("released_free"), kGiB - kContextBytes) << "releasing gives back nothing";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // a few more live lines
  EXPECT_EQ(last_live_free(exporter), exporter_free(2 * kGiB)) << exporter.output();
  release_and_expect_books_back_to_the_context(exporter);
}

// What the books do with the driver's virtual memory management today, which a reclaim will build on
// (docs/quota.md, "Guarantees and borrowing"): a device-located cuMemCreate is charged when created
// and refused past the quota; reserving, mapping and setting access charge nothing; a host-located
// handle is no device memory; re-backing a range at the same address keeps the books exact.
TEST_F(Accounting, VmmIsChargedAtCreateOnTheDeviceOnlyAndARemapKeepsTheBooksExact) {
  constexpr long long kQuota = 128 * kMiB;
  constexpr long long kBytes = 48 * kMiB;  // with the context, 112 MiB; a second 48 MiB would not fit
  Env env = base_env();
  env["GPUSLICE_MEMORY_LIMIT"] = "128Mi";
  Outcome o = run(probe_argv({"--scenario", "vmm-move", "--bytes", std::to_string(kBytes)}), env);
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  const long long start = kQuota - kContextBytes;
  EXPECT_EQ(o.num("start_free"), start);
  EXPECT_EQ(o.num("reserved_free"), start) << "an address range is no memory";
  EXPECT_EQ(o.num("created_free"), start - kBytes) << "charged when created";
  EXPECT_EQ(o.num("mapped_free"), start - kBytes) << "mapping charges nothing more";
  EXPECT_EQ(o.num("over_code"), 2) << "CUDA_ERROR_OUT_OF_MEMORY past the quota";
  EXPECT_EQ(o.num("host_create_code"), 0) << "host memory is not charged to the device quota";
  EXPECT_EQ(o.num("host_created_free"), start - kBytes);
  EXPECT_EQ(o.num("host_identical"), 1);
  EXPECT_EQ(o.num("on_host_free"), start) << "moved to host: the device bytes are back in the books";
  EXPECT_EQ(o.num("back_create_code"), 0);
  EXPECT_EQ(o.num("back_created_free"), start - kBytes);
  EXPECT_EQ(o.num("device_identical"), 1) << "back on the device at the same address, bitwise identical";
  EXPECT_EQ(o.num("back_free"), start - kBytes);
  EXPECT_EQ(o.num("end_free"), start) << "everything released: the books hold the context alone";
}

// The guarantee is recorded in the container's state beside the quota: the environment's request
// capped by the limits file's, shown by `gpuslice status`.
TEST_F(Accounting, TheGuaranteeIsRecordedBesideTheQuotaAndCappedByTheLimitsFile) {
  write_limits("GPUSLICE_MEMORY_LIMIT=none\nGPUSLICE_MEMORY_GUARANTEE=128Mi\n");
  Env env = base_env();
  env["GPUSLICE_MEMORY_LIMIT"] = "1Gi";
  env["GPUSLICE_MEMORY_GUARANTEE"] = "256Mi";
  Background holder(holder_argv(64 * kMiB), env, dir_ + "/holder.out");
  ASSERT_TRUE(holder.wait_for_output("hold_code=0", 10000)) << holder.output();
  std::string last;
  EXPECT_TRUE(status_shows(field("guarantee_bytes", 128 * kMiB), 5000, &last)) << last;
  EXPECT_NE(last.find(field("quota_bytes", kGiB)), std::string::npos) << last;
  write_limits("GPUSLICE_MEMORY_LIMIT=none\nGPUSLICE_MEMORY_GUARANTEE=none\n");
  EXPECT_TRUE(status_shows(field("guarantee_bytes", 256 * kMiB), 5000, &last))
      << "the cap lifted, the request applies: " << last;
}

// A guarantee above the limit for one device, keyed so that only the library can match them (the
// limit by index, the guarantee by UUID): CUDA fails closed with a message naming both.
TEST_F(Accounting, AGuaranteeAboveTheLimitOfItsDeviceFailsClosed) {
  Env env = base_env();
  env["GPUSLICE_MEMORY_LIMIT"] = "0=1Gi";
  env["GPUSLICE_MEMORY_GUARANTEE"] = R"({"GPU-6d6f636b-0000-4000-8000-000000000000": "2Gi"})";
  Outcome o = run(probe_argv({"--scenario", "fill"}), env);
  EXPECT_NE(o.exit_code, 0) << o.out << o.err;
  EXPECT_FALSE(o.has("allocated")) << "nothing was allocated: " << o.out;
  EXPECT_NE(o.err.find("memory guarantee of 2147483648 bytes is above its memory limit of 1073741824"),
            std::string::npos)
      << o.err;
  EXPECT_NE(o.err.find("GPUSLICE_MEMORY_GUARANTEE"), std::string::npos) << o.err;
}

}  // namespace
}  // namespace gpuslice::test
