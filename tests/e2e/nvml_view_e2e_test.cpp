// End to end: what NVML shows inside a container. Two containers (two shared-state directories)
// share one simulated GPU; each asks NVML, through the real libgpuslice.so, what nvidia-smi asks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <optional>
#include <string>

#include "process.h"

namespace gpuslice::test {
namespace {

constexpr long long kMiB = 1LL << 20;
constexpr long long kGiB = 1LL << 30;
constexpr long long kContextBytes = 64 * kMiB;  // what the mock driver charges per context
constexpr int kSuccess = 0;
constexpr int kInsufficientSize = 7;
constexpr int kNotFound = 6;
constexpr int kNotSupported = 3;

// Every running-process list the NVML ABI exports.
const char* const kLists[] = {
    "nvmlDeviceGetComputeRunningProcesses",      "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetComputeRunningProcesses_v3",   "nvmlDeviceGetGraphicsRunningProcesses",
    "nvmlDeviceGetGraphicsRunningProcesses_v2",  "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetMPSComputeRunningProcesses",   "nvmlDeviceGetMPSComputeRunningProcesses_v2",
    "nvmlDeviceGetMPSComputeRunningProcesses_v3"};

class NvmlView : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir("gpuslice-nvml-");
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override {
    b_.reset();  // the tenants end before their directories go
    a_.reset();
    remove_tree(dir_);
  }

  // Container a holds 1 GiB under an 8 GiB quota (running kernels back to back when `a_busy`);
  // container b holds 512 MiB under `b_limit` and stays idle. Both are ready when this returns and
  // run until the test ends. They start one after the other: where NVML shows host pids, a process
  // learns its own as the one pid that appeared with its context, which two contexts created at the
  // same moment make ambiguous (InAPidNamespaceTheContainerIsRecognisedByItsHostPids failed that way
  // under ASan in CI).
  void start_tenants(bool a_busy, const std::string& b_limit = "4Gi") {
    a_.emplace(work(kGiB, a_busy), container("a", "8Gi"), dir_ + "/a.out");
    ASSERT_TRUE(a_->wait_for_output("ready=1", 10000)) << a_->output();
    b_.emplace(work(512 * kMiB, false), container("b", b_limit), dir_ + "/b.out");
    ASSERT_TRUE(b_->wait_for_output("ready=1", 10000)) << b_->output();
  }

  // A process of container `name` (its own shared-state directory) on the machine's one mock GPU.
  Env container(const std::string& name, const std::string& memory_limit) const {
    Env env = card();
    env["LD_PRELOAD"] = GPUSLICE_PRELOAD;
    env["GPUSLICE_SHARED_DIR"] = dir_ + "/" + name + "/shared";
    env["GPUSLICE_LIMITS_FILE"] = dir_ + "/" + name + "/limits";
    env["GPUSLICE_NODE_DIR"] = dir_ + "/node";
    if (!memory_limit.empty()) env["GPUSLICE_MEMORY_LIMIT"] = memory_limit;
    return env;
  }
  // The host's view: the same machine without gpuslice.
  Env card() const {
    Env env;
    env["PATH"] = "/usr/bin:/bin";
    env["LD_LIBRARY_PATH"] = GPUSLICE_MOCK_DIR;
    env["GPUSLICE_MOCK_STATE_DIR"] = dir_ + "/mock";
    env["GPUSLICE_MOCK_DEVICES"] = "1";
    env["GPUSLICE_MOCK_MEMORY"] = std::to_string(16 * kGiB);
    env["GPUSLICE_MOCK_CONTEXT_BYTES"] = std::to_string(kContextBytes);
    if (!pid_offset_.empty()) env["GPUSLICE_MOCK_NVML_PID_OFFSET"] = pid_offset_;
    env["ASAN_OPTIONS"] = "verify_asan_link_order=0:detect_leaks=0";
    return env;
  }
  std::vector<std::string> work(long long bytes, bool busy) const {
    std::vector<std::string> argv{GPUSLICE_NVML_VIEW_APP, "work",      "--bytes",
                                  std::to_string(bytes),  "--seconds", "20"};
    if (busy) argv.emplace_back("--busy");
    return argv;
  }
  Outcome query(const Env& env, const std::vector<std::string>& name_pids = {}) const {
    std::vector<std::string> argv{GPUSLICE_NVML_VIEW_APP, "query"};
    argv.insert(argv.end(), name_pids.begin(), name_pids.end());
    return run(argv, env);
  }

  std::string dir_;
  std::string pid_offset_;
  std::optional<Background> a_;
  std::optional<Background> b_;
};

std::string pid_text(pid_t pid, long long offset = 0) { return std::to_string(pid + offset); }

// Two pids as the probe prints a list holding both: ascending, comma-separated.
std::string both_pids(pid_t x, pid_t y) {
  return x < y ? pid_text(x) + "," + pid_text(y) : pid_text(y) + "," + pid_text(x);
}

// Container a runs kernels back to back with 1 GiB under an 8 GiB quota; container b holds 512 MiB
// under 4 GiB and stays idle. Each sees itself alone; the host sees both.
TEST_F(NvmlView, EachContainerListsOnlyItsOwnProcessesInEveryListVersion) {
  ASSERT_NO_FATAL_FAILURE(start_tenants(true));

  Outcome host = query(card());
  ASSERT_EQ(host.exit_code, 0) << host.out << host.err;
  const std::string both = both_pids(a_->pid(), b_->pid());
  Outcome in_a = query(container("a", "8Gi"));
  Outcome in_b = query(container("b", "4Gi"));
  ASSERT_EQ(in_a.exit_code, 0) << in_a.out << in_a.err;
  ASSERT_EQ(in_b.exit_code, 0) << in_b.out << in_b.err;
  for (const char* fn : kLists) {
    SCOPED_TRACE(fn);
    const std::string f = fn;
    EXPECT_EQ(host.values.at(f), both) << "the simulated card lists both tenants";
    EXPECT_EQ(host.num(f + "_count"), 2);
    EXPECT_EQ(in_a.num(f + "_rc"), kSuccess);
    EXPECT_EQ(in_a.values.at(f), pid_text(a_->pid()));
    EXPECT_EQ(in_b.values.at(f), pid_text(b_->pid()));
    // The driver's per-process figure is kept: allocation plus context.
    EXPECT_EQ(in_a.num(f + "_used0"), kGiB + kContextBytes);
    EXPECT_EQ(in_b.num(f + "_used0"), 512 * kMiB + kContextBytes);
  }
  for (const char* mode : {"detail0", "detail1", "detail2"}) {
    SCOPED_TRACE(mode);
    EXPECT_EQ(host.values.at(mode), both);
    EXPECT_EQ(in_a.values.at(mode), pid_text(a_->pid()));
    EXPECT_EQ(in_b.values.at(mode), pid_text(b_->pid()));
  }
  EXPECT_EQ(host.values.at("accounting"), both);
  EXPECT_EQ(in_a.values.at("accounting"), pid_text(a_->pid()));
  EXPECT_EQ(in_b.values.at("accounting"), pid_text(b_->pid()));
  EXPECT_EQ(in_a.num("accounting_count"), 1);
  EXPECT_EQ(in_a.values.at("samples"), pid_text(a_->pid()));
  EXPECT_EQ(in_a.values.at("util_info"), pid_text(a_->pid()));
  EXPECT_EQ(host.values.at("samples"), pid_text(a_->pid())) << "only a used the SMs";
  // b's process never ran a kernel: it has no sample, and a's is not b's to see.
  EXPECT_EQ(in_b.num("samples_rc"), kNotFound);
  EXPECT_EQ(in_b.num("util_info_rc"), kNotFound);
}

// A program that asks a pid's name (nvmlSystemGetProcessName): inside a slice another tenant's pid
// has none; the host names both.
TEST_F(NvmlView, AnotherTenantsPidHasNoNameInsideASlice) {
  ASSERT_NO_FATAL_FAILURE(start_tenants(false));
  const std::string pa = pid_text(a_->pid()), pb = pid_text(b_->pid());
  Outcome host = query(card(), {pa, pb});
  Outcome in_a = query(container("a", "8Gi"), {pa, pb});
  ASSERT_EQ(host.exit_code, 0) << host.out << host.err;
  ASSERT_EQ(in_a.exit_code, 0) << in_a.out << in_a.err;
  EXPECT_EQ(host.num("name_" + pa + "_rc"), kSuccess);
  EXPECT_EQ(host.num("name_" + pb + "_rc"), kSuccess);
  EXPECT_EQ(in_a.num("name_" + pa + "_rc"), kSuccess);
  EXPECT_EQ(in_a.values.at("name_" + pa), "process-" + pa);
  EXPECT_EQ(in_a.num("name_" + pb + "_rc"), kNotFound);
}

// nvidia-smi (580) takes its Processes box, `-q` and `--query-compute-apps` from the process lists
// of NVML's internal export table, names included: inside a slice those slots list the container's
// own entries only, reached the way nvidia-smi reaches them (dlopen + dlsym) and through the
// global scope; the host sees both tenants.
TEST_F(NvmlView, NvidiaSmisProcessTableListsOnlyTheContainersOwnProcesses) {
  ASSERT_NO_FATAL_FAILURE(start_tenants(false));
  const std::string pa = pid_text(a_->pid()), pb = pid_text(b_->pid());
  const std::string both = both_pids(a_->pid(), b_->pid());
  Outcome host = query(card());
  Outcome in_a = query(container("a", "8Gi"));
  Outcome in_b = query(container("b", "4Gi"));
  ASSERT_EQ(host.exit_code, 0) << host.out << host.err;
  ASSERT_EQ(in_a.exit_code, 0) << in_a.out << in_a.err;
  ASSERT_EQ(in_b.exit_code, 0) << in_b.out << in_b.err;
  EXPECT_EQ(host.num("export_rc"), kSuccess);
  EXPECT_EQ(in_a.num("export_rc"), kSuccess);
  EXPECT_EQ(in_a.num("export_other_rc"), kNotSupported) << "another table's id is the library's to answer";
  EXPECT_EQ(in_a.num("export_size"), host.num("export_size")) << "the copy is the whole table";
  EXPECT_EQ(in_a.num("export_global_found"), 1) << "the preloaded library exports the hook";
  for (const char* slot : {"213", "214", "215"}) {
    SCOPED_TRACE(slot);
    const std::string list = std::string("export") + slot;
    EXPECT_EQ(host.num(list + "_rc"), kSuccess);
    EXPECT_EQ(host.values.at(list), both) << "the simulated card lists both tenants";
    EXPECT_EQ(host.values.at(list + "_name_" + pb), "process-" + pb);
    EXPECT_EQ(in_a.num(list + "_rc"), kSuccess);
    EXPECT_EQ(in_a.num(list + "_count"), 1);
    EXPECT_EQ(in_a.values.at(list), pa);
    EXPECT_EQ(in_a.values.at(list + "_name_" + pa), "process-" + pa);
    EXPECT_EQ(in_a.num(list + "_used_" + pa), kGiB + kContextBytes) << "the driver's per-process figure";
    EXPECT_FALSE(in_a.has(list + "_name_" + pb)) << "b's name is not in a's table";
    EXPECT_EQ(in_a.values.at("export_global" + std::string(slot)), pa);
    EXPECT_EQ(in_b.values.at(list), pb);
    EXPECT_EQ(in_b.values.at(list + "_name_" + pb), "process-" + pb);
    // Room for one entry while the card has two: the library refuses and asks for two, which
    // counts the other tenant; inside a slice the count is not shown.
    EXPECT_EQ(host.num(list + "_short_rc"), kInsufficientSize);
    EXPECT_EQ(host.num(list + "_short_count"), 2);
    EXPECT_EQ(in_a.num(list + "_short_rc"), kInsufficientSize);
    EXPECT_EQ(in_a.num(list + "_short_count"), 0);
  }
}

// The table's layout is known for the 580 driver branch only: on another one nvidia-smi's table is
// handed out as the library made it (said once, at info level); the public lists stay filtered.
TEST_F(NvmlView, OnAnotherDriverBranchNvidiaSmisProcessTableIsLeftAlone) {
  ASSERT_NO_FATAL_FAILURE(start_tenants(false));
  const std::string pa = pid_text(a_->pid()), pb = pid_text(b_->pid());
  const std::string both = both_pids(a_->pid(), b_->pid());
  Env env = container("a", "8Gi");
  env["GPUSLICE_MOCK_NVML_DRIVER_VERSION"] = "590.10.01";
  env["GPUSLICE_LOG_LEVEL"] = "info";
  Outcome in_a = query(env);
  ASSERT_EQ(in_a.exit_code, 0) << in_a.out << in_a.err;
  EXPECT_EQ(in_a.values.at("export213"), both);
  EXPECT_EQ(in_a.values.at("export_global213"), both);
  EXPECT_EQ(in_a.values.at("nvmlDeviceGetComputeRunningProcesses_v3"), pa);
  const std::string said = "nvidia-smi's process table is not filtered";
  const std::size_t first = in_a.err.find(said);
  EXPECT_NE(first, std::string::npos) << in_a.err;
  EXPECT_EQ(in_a.err.find(said, first + 1), std::string::npos) << "said once: " << in_a.err;
}

// The size protocol counts the filtered list: a caller sizing its buffer from the count query gets
// exactly its own entries, and one entry short is refused with the container's count.
TEST_F(NvmlView, TheSizeProtocolCountsOnlyTheContainersEntries) {
  Background a1(work(256 * kMiB, false), container("a", "8Gi"), dir_ + "/a1.out");
  Background a2(work(256 * kMiB, false), container("a", "8Gi"), dir_ + "/a2.out");
  Background b1(work(256 * kMiB, false), container("b", "4Gi"), dir_ + "/b1.out");
  Background b2(work(256 * kMiB, false), container("b", "4Gi"), dir_ + "/b2.out");
  Background b3(work(256 * kMiB, false), container("b", "4Gi"), dir_ + "/b3.out");
  for (Background* p : {&a1, &a2, &b1, &b2, &b3})
    ASSERT_TRUE(p->wait_for_output("ready=1", 10000)) << p->output();
  Outcome host = query(card());
  Outcome in_a = query(container("a", "8Gi"));
  ASSERT_EQ(in_a.exit_code, 0) << in_a.out << in_a.err;
  for (const char* fn : kLists) {
    SCOPED_TRACE(fn);
    const std::string f = fn;
    EXPECT_EQ(host.num(f + "_count"), 5);
    EXPECT_EQ(in_a.num(f + "_count_rc"), kInsufficientSize);
    EXPECT_EQ(in_a.num(f + "_count"), 2);
    EXPECT_EQ(in_a.num(f + "_short_rc"), kInsufficientSize);
    EXPECT_EQ(in_a.num(f + "_short_count"), 2);
  }
  EXPECT_EQ(in_a.num("detail0_count_rc"), kInsufficientSize);
  EXPECT_EQ(in_a.num("detail0_count"), 2);
  EXPECT_EQ(in_a.num("detail_bad_version_rc"), 25) << "the real library still checks the version";
}

// GPU utilisation is the container's own share: the busy tenant sees its work, the idle one 0 %,
// though the card is busy.
TEST_F(NvmlView, UtilizationIsTheContainersOwnShare) {
  ASSERT_NO_FATAL_FAILURE(start_tenants(true));
  usleep(1200000);  // a full sampling second of a's work
  Outcome host = query(card());
  Outcome in_a = query(container("a", "8Gi"));
  Outcome in_b = query(container("b", "4Gi"));
  EXPECT_GE(host.num("utilization_gpu"), 70);
  EXPECT_EQ(in_a.num("utilization_rc"), kSuccess);
  EXPECT_GE(in_a.num("utilization_gpu"), 70);
  EXPECT_EQ(in_b.num("utilization_rc"), kSuccess);
  EXPECT_EQ(in_b.num("utilization_gpu"), 0) << "b ran nothing";
  EXPECT_EQ(in_b.num("utilization_memory"), 0);
  // Encoder and decoder likewise (the simulated video engines follow the SMs).
  EXPECT_GE(host.num("encoder"), 70);
  EXPECT_GE(in_a.num("encoder"), 70);
  EXPECT_GE(in_a.num("decoder"), 70);
  EXPECT_EQ(in_b.num("encoder_rc"), kSuccess);
  EXPECT_EQ(in_b.num("encoder"), 0);
  EXPECT_EQ(in_b.num("decoder"), 0);
  EXPECT_EQ(in_b.num("encoder_period_us"), host.num("encoder_period_us")) << "the driver's sampling period";
  // The card's own utilisation samples cannot be split by tenant: not shown inside a slice.
  EXPECT_EQ(host.num("gpu_samples_rc"), kSuccess);
  EXPECT_GE(host.num("gpu_samples_last"), 70);
  EXPECT_EQ(in_a.num("gpu_samples_rc"), kNotSupported);
  EXPECT_EQ(in_b.num("gpu_samples_rc"), kNotSupported);
}

// Every memory surface agrees with the quota: total = quota, used + free + reserved = total,
// BAR1 no larger than the quota.
TEST_F(NvmlView, EveryMemorySurfaceIsConsistentWithTheQuota) {
  ASSERT_NO_FATAL_FAILURE(start_tenants(false));
  Outcome host = query(card());
  EXPECT_EQ(host.num("mem_total"), 16 * kGiB);
  EXPECT_EQ(host.num("bar1_total"), 16 * kGiB);
  struct Case {
    const char* name;
    long long quota;
    long long used;
  };
  for (const Case& c :
       {Case{"a", 8 * kGiB, kGiB + kContextBytes}, Case{"b", 4 * kGiB, 512 * kMiB + kContextBytes}}) {
    SCOPED_TRACE(c.name);
    Outcome o = query(container(c.name, c.name[0] == 'a' ? "8Gi" : "4Gi"));
    ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
    EXPECT_EQ(o.num("mem_total"), c.quota);
    EXPECT_EQ(o.num("mem_used"), c.used);
    EXPECT_EQ(o.num("mem_used") + o.num("mem_free"), c.quota);
    EXPECT_EQ(o.num("mem2_rc"), kSuccess);
    EXPECT_EQ(o.num("mem2_total"), c.quota);
    EXPECT_EQ(o.num("mem2_reserved"), 0);
    EXPECT_EQ(o.num("mem2_used"), c.used);
    EXPECT_EQ(o.num("mem2_used") + o.num("mem2_free") + o.num("mem2_reserved"), c.quota);
    EXPECT_NE(o.num("mem2_bad_version_rc"), kSuccess);
    EXPECT_EQ(o.num("bar1_rc"), kSuccess);
    EXPECT_EQ(o.num("bar1_total"), c.quota);
    EXPECT_EQ(o.num("bar1_used"), host.num("bar1_used")) << "BAR1 use is the driver's figure";
    EXPECT_EQ(o.num("bar1_used") + o.num("bar1_free"), c.quota);
  }
}

// A card other tenants fill: free is never more than the card has, as in cuMemGetInfo_v2; the part
// of the quota the card cannot give is v2's `reserved` (v1 counts it in `used`, as NVML's v1 does
// with the driver's reservation), and every struct still adds up to the quota.
TEST_F(NvmlView, OnAFullCardTheQuotaTheCardCannotGiveIsShownAsReserved) {
  Background a(work(kGiB, false), container("a", "8Gi"), dir_ + "/a.out");
  Background b(work(10 * kGiB, false), container("b", "12Gi"), dir_ + "/b.out");
  ASSERT_TRUE(a.wait_for_output("ready=1", 10000)) << a.output();
  ASSERT_TRUE(b.wait_for_output("ready=1", 10000)) << b.output();
  Outcome host = query(card());
  const long long card_free = 16 * kGiB - kGiB - 10 * kGiB - 2 * kContextBytes;
  ASSERT_EQ(host.num("mem_free"), card_free);
  Outcome o = query(container("a", "8Gi"));
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_EQ(o.num("mem2_total"), 8 * kGiB);
  EXPECT_EQ(o.num("mem2_used"), kGiB + kContextBytes);
  EXPECT_EQ(o.num("mem2_free"), card_free);
  EXPECT_EQ(o.num("mem2_reserved"), 8 * kGiB - kGiB - kContextBytes - card_free);
  EXPECT_EQ(o.num("mem2_used") + o.num("mem2_free") + o.num("mem2_reserved"), 8 * kGiB);
  EXPECT_EQ(o.num("mem_total"), 8 * kGiB);
  EXPECT_EQ(o.num("mem_free"), card_free);
  EXPECT_EQ(o.num("mem_used") + o.num("mem_free"), 8 * kGiB);
}

// Where NVML reports host pids (a PID namespace), the container's entries are those of the host
// pids its processes recorded; the others stay hidden.
TEST_F(NvmlView, InAPidNamespaceTheContainerIsRecognisedByItsHostPids) {
  constexpr long long kOffset = 1000000;
  pid_offset_ = std::to_string(kOffset);
  ASSERT_NO_FATAL_FAILURE(start_tenants(false));
  Outcome in_a = query(container("a", "8Gi"));
  Outcome in_b = query(container("b", "4Gi"));
  for (const char* fn : kLists) {
    SCOPED_TRACE(fn);
    EXPECT_EQ(in_a.values.at(fn), pid_text(a_->pid(), kOffset));
    EXPECT_EQ(in_b.values.at(fn), pid_text(b_->pid(), kOffset));
  }
}

// Without a limit gpuslice changes nothing: the preloaded library forwards every answer.
TEST_F(NvmlView, AContainerWithoutLimitsSeesTheCard) {
  ASSERT_NO_FATAL_FAILURE(start_tenants(false, ""));
  Outcome host = query(card());
  Outcome unlimited = query(container("b", ""), {pid_text(a_->pid())});
  ASSERT_EQ(unlimited.exit_code, 0) << unlimited.out << unlimited.err;
  EXPECT_EQ(unlimited.num("name_" + pid_text(a_->pid()) + "_rc"), kSuccess) << "another tenant's name";
  for (const char* key : {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses",
                          "detail0", "export213", "mem_total", "mem_used", "bar1_total"}) {
    SCOPED_TRACE(key);
    EXPECT_EQ(unlimited.values.at(key), host.values.at(key));
  }
}

}  // namespace
}  // namespace gpuslice::test
