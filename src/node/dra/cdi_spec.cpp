#include "node/dra/cdi_spec.h"

namespace gpuslice::node::dra {

using nlohmann::json;

std::string cdi_device_id(const std::string& device) { return std::string(kCdiKind) + "=" + device; }

std::string cdi_spec_file_name(const std::string& device) { return "gpuslice.io-claim_" + device + ".json"; }

json build_cdi_spec(const std::string& device, const ContainerEdits& edits) {
  json env = json::array();
  for (const auto& [key, value] : edits.env) env.push_back(key + "=" + value);
  json mounts = json::array();
  for (const auto& m : edits.mounts) {
    json options = json::array({"rbind", "nosuid", "nodev"});
    options.push_back(m.read_only ? "ro" : "rw");
    mounts.push_back({{"hostPath", m.host_path}, {"containerPath", m.container_path}, {"options", options}});
  }
  json nodes = json::array();
  for (const auto& d : edits.device_nodes) nodes.push_back({{"path", d.path}, {"hostPath", d.host_path}});
  json container_edits = {{"env", env}, {"mounts", mounts}};
  if (!nodes.empty()) container_edits["deviceNodes"] = nodes;
  return {{"cdiVersion", kCdiVersion},
          {"kind", kCdiKind},
          {"devices", json::array({{{"name", device}, {"containerEdits", container_edits}}})}};
}

}  // namespace gpuslice::node::dra
