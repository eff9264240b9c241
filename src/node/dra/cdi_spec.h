// The CDI spec a prepared claim hands the container runtime (cdiVersion 0.6.0): one CDI device per
// claim, kind gpuslice.io/claim, named after the claim's uid, whose container edits inject the
// library, the claim's state and read-only config directories, the GPUs' device nodes and the
// variables. The runtime reads it from the CDI spec directory (/var/run/cdi) when the kubelet passes
// the device id "gpuslice.io/claim=<uid>".
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace gpuslice::node::dra {

inline constexpr const char* kCdiVersion = "0.6.0";
inline constexpr const char* kCdiKind = "gpuslice.io/claim";

struct ContainerEdits {
  std::map<std::string, std::string> env;
  struct Mount {
    std::string host_path, container_path;
    bool read_only = true;
  };
  std::vector<Mount> mounts;
  struct DeviceNode {
    std::string path;       // inside the container
    std::string host_path;  // on the host
  };
  std::vector<DeviceNode> device_nodes;
};

// "gpuslice.io/claim=<device>"
std::string cdi_device_id(const std::string& device);
// The spec's file name in the CDI directory: "gpuslice.io-claim_<device>.json".
std::string cdi_spec_file_name(const std::string& device);
nlohmann::json build_cdi_spec(const std::string& device, const ContainerEdits& edits);

}  // namespace gpuslice::node::dra
