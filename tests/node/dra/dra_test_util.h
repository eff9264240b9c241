// Shared pieces of the DRA tests: a node of fake GPUs and a ResourceClaim as the API server writes it.
#pragma once

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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

inline nlohmann::json slice_config(const nlohmann::json& fields) {
  nlohmann::json c = {{"apiVersion", "gpuslice.io/v1alpha1"}, {"kind", "SliceConfig"}};
  for (const auto& [k, v] : fields.items()) c[k] = v;
  return c;
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
