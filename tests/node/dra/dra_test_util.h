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

#include <unistd.h>

#include <cstdio>
#include <fstream>

namespace gpuslice::node::dra::test {

inline bool have_models() { return ::access((models_dir() + "/V1ResourceSlice.js").c_str(), R_OK) == 0; }

// Validates `object` strictly against the pinned resource.k8s.io/v1 (etc.) schema with the chart
// checks' validator; "" when valid, else its report.
inline std::string schema_errors(const nlohmann::json& object) {
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
