// Shared pieces of the DRA tests: a node of fake GPUs, a ResourceClaim as the API server writes it,
// and a claim preparer on a temporary host.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "../test_util.h"
#include "node/dra/claim_preparer.h"
#include "node/dra/claim_reader.h"

namespace gpuslice::node::dra::test {

inline DriverNode two_gpu_node(const std::string& pool = "node-a") {
  DriverNode node;
  node.driver = "gpuslice.io";
  node.pool = pool;
  for (unsigned i = 0; i < 2; ++i) {
    GpuInfo g;
    g.index = i;
    g.minor = i;
    g.uuid = "GPU-0000000" + std::to_string(i) + "-aaaa-bbbb-cccc-dddddddddddd";
    g.name = "NVIDIA H100 80GB HBM3";
    g.memory_total_bytes = 80ULL << 30;
    g.driver_version = "580.159.04";
    g.compute_capability = "9.0";
    node.gpus.push_back(g);
  }
  return node;
}

struct Result {
  std::string request = "gpu", driver = "gpuslice.io", pool = "node-a", device = "gpu-0";
  nlohmann::json consumed = nlohmann::json{{"memory", "8Gi"}, {"compute", "30"}};
  std::string share_id = "6f1a0e5c-0000-4000-8000-000000000001";
};

// A resource.k8s.io/v1 ResourceClaim, allocated; `parameters` (if not null) as the claim's config.
inline nlohmann::json allocated_claim(const std::string& uid, const std::vector<Result>& results,
                                      const nlohmann::json& parameters = nullptr,
                                      const std::string& ns = "team-a",
                                      const std::string& name = "train-gpu") {
  nlohmann::json res = nlohmann::json::array();
  for (const auto& r : results) {
    nlohmann::json one = {
        {"request", r.request}, {"driver", r.driver}, {"pool", r.pool}, {"device", r.device}};
    if (!r.consumed.is_null()) one["consumedCapacity"] = r.consumed;
    if (!r.share_id.empty()) one["shareID"] = r.share_id;
    res.push_back(one);
  }
  nlohmann::json devices = {{"results", res}};
  if (!parameters.is_null()) {
    devices["config"] =
        nlohmann::json::array({{{"source", "FromClaim"},
                                {"requests", {"gpu"}},
                                {"opaque", {{"driver", "gpuslice.io"}, {"parameters", parameters}}}}});
  }
  nlohmann::json request = {{"name", "gpu"},
                            {"exactly",
                             {{"deviceClassName", "gpuslice.io"},
                              {"capacity", {{"requests", {{"memory", "8Gi"}, {"compute", "30"}}}}}}}};
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceClaim"},
          {"metadata", {{"namespace", ns}, {"name", name}, {"uid", uid}, {"resourceVersion", "42"}}},
          {"spec", {{"devices", {{"requests", nlohmann::json::array({request})}}}}},
          {"status",
           {{"allocation", {{"devices", devices}}},
            {"reservedFor", nlohmann::json::array(
                                {{{"resource", "pods"}, {"name", name + "-pod"}, {"uid", "pod-" + uid}}})}}}};
}

// Claims by "ns/name", answered as the API server would.
class FakeClaims final : public ClaimSource {
 public:
  std::map<std::string, nlohmann::json> claims;
  int calls = 0;
  gpuslice::Result<nlohmann::json> get_claim(const std::string& ns, const std::string& name) override {
    ++calls;
    auto it = claims.find(ns + "/" + name);
    if (it == claims.end()) return make_error("resourceclaims \"" + name + "\" not found");
    return it->second;
  }
};

// A preparer over FakeClaims on a temporary host (<tmp>/root, <tmp>/cdi, <tmp>/dev): the set-up of
// the kubelet and end-to-end tests. Mixed into their ::testing::Test.
class PreparerFixture {
 protected:
  node::test::TempDir tmp;
  FakeClaims claims;
  std::unique_ptr<ClaimPreparer> preparer;

  PreparerOptions preparer_options() const {
    PreparerOptions o;
    o.root = tmp / "root";
    o.cdi_dir = tmp / "cdi";
    o.dev_root = tmp / "dev";
    o.node = two_gpu_node();
    return o;
  }
  // Creates the preparer and recovers its (empty) checkpoint.
  void start_preparer(const PreparerOptions& options) {
    preparer = std::make_unique<ClaimPreparer>(options, claims);
    auto recovered = preparer->recover();
    ASSERT_TRUE(recovered) << recovered.error();
  }
};

inline nlohmann::json slice_config(const nlohmann::json& fields) {
  nlohmann::json c = {{"apiVersion", "gpuslice.io/v1alpha1"}, {"kind", "SliceConfig"}};
  for (const auto& [k, v] : fields.items()) c[k] = v;
  return c;
}

// What the API server checks of a ResourceSlice beyond its OpenAPI schema (resource.k8s.io/v1 of
// 1.36, the rules its field documentation states): devices and sharedCounters never in one slice;
// at most 8 counter sets, 32 counters in a set; at most 128 devices, 64 once any consumes counters or
// has taints; at most 2 counter consumptions a device, one per counter set. "" when none is broken.
inline std::string slice_rule_errors(const nlohmann::json& slice) {
  const nlohmann::json& spec = slice.at("spec");
  const bool has_devices = spec.contains("devices") && !spec["devices"].empty();
  const bool has_counters = spec.contains("sharedCounters") && !spec["sharedCounters"].empty();
  if (has_devices && has_counters) return "only one of devices and sharedCounters may be set";
  if (has_counters) {
    if (spec["sharedCounters"].size() > 8) return "more than 8 counter sets";
    for (const auto& set : spec["sharedCounters"])
      if (set.at("counters").size() > 32) return "more than 32 counters in a set";
  }
  if (!has_devices) return "";
  bool limited = false;
  for (const auto& d : spec["devices"]) {
    limited = limited || d.contains("consumesCounters") || d.contains("taints");
    if (!d.contains("consumesCounters")) continue;
    if (d["consumesCounters"].size() > 2) return "device " + d["name"].get<std::string>() + ": more than 2";
    std::set<std::string> sets;
    for (const auto& c : d["consumesCounters"])
      if (!sets.insert(c.at("counterSet").get<std::string>()).second)
        return "device " + d["name"].get<std::string>() + ": counter set consumed twice";
  }
  if (spec["devices"].size() > (limited ? 64u : 128u)) return "too many devices";
  return "";
}

// How the scheduler counts counters (KEP-4815, with KEP-5075's rule for shared devices): every
// allocated device consumes its consumesCounters from the pool's counter sets; a device that allows
// multiple allocations consumes them once while it holds any share, however many. `allocated`
// names devices, a shared one once per share. Returns the first counter that is overdrawn, or "".
inline std::string overdrawn_counter(const std::vector<nlohmann::json>& pool,
                                     const std::vector<std::string>& allocated) {
  std::map<std::string, std::uint64_t> available, used;  // "set/counter"
  std::map<std::string, nlohmann::json> devices;
  for (const auto& slice : pool) {
    for (const auto& set : slice["spec"].value("sharedCounters", nlohmann::json::array()))
      for (const auto& [name, c] : set["counters"].items())
        available[set["name"].get<std::string>() + "/" + name] = std::stoull(c["value"].get<std::string>());
    for (const auto& d : slice["spec"].value("devices", nlohmann::json::array())) devices[d["name"]] = d;
  }
  std::set<std::string> counted;
  for (const auto& name : allocated) {
    const nlohmann::json& d = devices.at(name);
    if (!counted.insert(name).second) {
      if (d.value("allowMultipleAllocations", false)) continue;  // another share: counted already
      return name + " allocated twice";
    }
    for (const auto& c : d.value("consumesCounters", nlohmann::json::array()))
      for (const auto& [counter, q] : c["counters"].items())
        used[c["counterSet"].get<std::string>() + "/" + counter] +=
            std::stoull(q["value"].get<std::string>());
  }
  for (const auto& [key, amount] : used) {
    if (!available.count(key)) return key + " is no counter of the pool";
    if (amount > available[key]) return key;
  }
  return "";
}

// The Kubernetes API models the chart checks use (scripts/chart/install-tools.sh), if installed.
inline std::string models_dir() {
  const std::string dir = std::string(GPUSLICE_SOURCE_DIR) + "/.tools/k8s-models";
  return dir;
}

}  // namespace gpuslice::node::dra::test

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <optional>

namespace gpuslice::node::dra::test {

inline bool have_models() { return ::access((models_dir() + "/V1ResourceSlice.js").c_str(), R_OK) == 0; }

// One validator process (validate_k8s.py --serve) for the whole test program, started at the first
// object: a Python start and the models' loading cost about 0.3-1 CPU-s, paid once instead of once
// per object (hundreds in the DRA API suite, in each of the release and sanitizer runs).
class SchemaValidator {
 public:
  static SchemaValidator& instance() {
    static SchemaValidator validator;
    return validator;
  }
  // The validator's report ("" when valid); nullopt when the process cannot be used.
  std::optional<std::string> check(const nlohmann::json& object) {
    std::lock_guard lock(mutex_);
    if (from_ == nullptr && !start()) return std::nullopt;
    const std::string line = object.dump() + "\n";  // dump() escapes newlines: one object a line
    std::size_t done = 0;
    while (done < line.size()) {
      const ssize_t n = ::write(to_, line.data() + done, line.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return stop();
      done += static_cast<std::size_t>(n);
    }
    char* answer = nullptr;
    std::size_t capacity = 0;
    const ssize_t got = ::getline(&answer, &capacity, from_);
    std::string text = got > 0 ? std::string(answer, static_cast<std::size_t>(got)) : std::string();
    std::free(answer);
    if (got <= 0) return stop();
    const auto reply = nlohmann::json::parse(text, nullptr, false);
    if (reply.is_discarded() || !reply.contains("ok")) return stop();
    return reply["ok"].get<bool>() ? std::string() : reply.value("report", std::string("invalid"));
  }
  ~SchemaValidator() {
    std::lock_guard lock(mutex_);
    stop();
  }

 private:
  bool start() {
    ::signal(SIGPIPE, SIG_IGN);  // a validator that died is seen as a failed write, not a signal
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0) return false;
    if (::pipe2(out, O_CLOEXEC) != 0) {
      ::close(in[0]), ::close(in[1]);
      return false;
    }
    const std::string script = std::string(GPUSLICE_SOURCE_DIR) + "/scripts/chart/validate_k8s.py";
    const std::string models = models_dir();
    const char* argv[] = {"python3", script.c_str(), "--models", models.c_str(), "--serve", nullptr};
    const pid_t pid = ::fork();
    if (pid == 0) {  // only async-signal-safe calls until exec
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::execvp("python3", const_cast<char* const*>(argv));
      ::_exit(127);
    }
    ::close(in[0]), ::close(out[1]);
    if (pid < 0) {
      ::close(in[1]), ::close(out[0]);
      return false;
    }
    pid_ = pid;
    owner_ = ::getpid();
    to_ = in[1];
    from_ = ::fdopen(out[0], "r");
    if (from_ == nullptr) {
      ::close(out[0]);
      stop();
      return false;
    }
    return true;
  }
  std::nullopt_t stop() {
    if (to_ >= 0) ::close(to_);
    if (from_ != nullptr) std::fclose(from_);
    if (pid_ > 0 && owner_ == ::getpid()) {  // a forked child exiting leaves its parent's validator
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
    to_ = -1, from_ = nullptr, pid_ = -1;
    return std::nullopt;
  }

  std::mutex mutex_;
  pid_t pid_ = -1;
  pid_t owner_ = -1;
  int to_ = -1;
  FILE* from_ = nullptr;
};

// Validates `object` strictly against the pinned resource.k8s.io/v1 (etc.) schema with the chart
// checks' validator; "" when valid, else its report.
inline std::string schema_errors(const nlohmann::json& object) {
  if (auto report = SchemaValidator::instance().check(object)) return *report;
  // The validator process could not be used: one run per object, as the chart checks do.
  char path[] = "/tmp/gpuslice-dra-object-XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0) return "mkstemp failed";
  ::close(fd);
  std::ofstream(path) << object.dump(2);
  const std::string command = "python3 " + std::string(GPUSLICE_SOURCE_DIR) +
                              "/scripts/chart/validate_k8s.py --no-links --models " + models_dir() + " " +
                              path + " 2>&1";
  std::string out;
  if (FILE* p = ::popen(command.c_str(), "r")) {
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    const int status = ::pclose(p);
    ::unlink(path);
    return status == 0 ? "" : out;
  }
  ::unlink(path);
  return "cannot run the validator";
}

}  // namespace gpuslice::node::dra::test
