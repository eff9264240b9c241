#include "node/dra/resource_slice.h"

namespace gpuslice::node::dra {

using nlohmann::json;

std::string device_name(const GpuInfo& gpu) { return "gpu-" + std::to_string(gpu.index); }

std::string slice_name(const SliceOptions& options) {
  std::string driver = options.driver;
  for (char& c : driver) {
    if (c == '.') c = '-';
  }
  return options.node_name + "-" + driver;
}

std::uint64_t published_memory(const GpuInfo& gpu) {
  return gpu.memory_total_bytes / kMemoryStep * kMemoryStep;
}

std::optional<std::string> semantic_version(std::string_view dotted) {
  std::vector<unsigned long> parts;
  std::string current;
  for (std::size_t i = 0; i <= dotted.size(); ++i) {
    if (i == dotted.size() || dotted[i] == '.') {
      if (current.empty() || current.size() > 9) return std::nullopt;
      parts.push_back(std::stoul(current));
      current.clear();
    } else if (dotted[i] >= '0' && dotted[i] <= '9') {
      current += dotted[i];
    } else {
      return std::nullopt;
    }
  }
  if (parts.empty() || parts.size() > 3) return std::nullopt;
  while (parts.size() < 3) parts.push_back(0);
  return std::to_string(parts[0]) + "." + std::to_string(parts[1]) + "." + std::to_string(parts[2]);
}

json build_resource_slice(const std::vector<GpuInfo>& gpus, const SliceOptions& options) {
  json devices = json::array();
  for (const auto& gpu : gpus) {
    json attributes = {
        {"uuid", {{"string", gpu.uuid}}},
        {"index", {{"int", gpu.index}}},
        {"productName", {{"string", gpu.name.empty() ? "unknown" : gpu.name}}},
        {"memoryBytes", {{"int", static_cast<std::int64_t>(published_memory(gpu))}}},
        {"enforcement", {{"string", options.enforcement}}},
    };
    if (auto cc = semantic_version(gpu.compute_capability))
      attributes["cudaComputeCapability"] = {{"version", *cc}};
    if (auto dv = semantic_version(gpu.driver_version)) attributes["driverVersion"] = {{"version", *dv}};
    const std::string memory = std::to_string(published_memory(gpu));
    const std::string step = std::to_string(kMemoryStep);
    json capacity = {
        {kMemoryCapacity,
         {{"value", memory},
          {"requestPolicy", {{"default", memory}, {"validRange", {{"min", step}, {"step", step}}}}}}},
        {kComputeCapacity,
         {{"value", "100"},
          {"requestPolicy",
           {{"default", "100"}, {"validRange", {{"min", "1"}, {"max", "100"}, {"step", "1"}}}}}}},
    };
    json device = {{"name", device_name(gpu)},
                   {"attributes", attributes},
                   {"capacity", capacity},
                   {"allowMultipleAllocations", true}};
    if (!gpu.healthy) {
      // A failing GPU stays listed (claims on it can still be unprepared) but takes no new claims.
      device["taints"] = json::array({{{"key", std::string(options.driver) + "/unhealthy"},
                                       {"value", "true"},
                                       {"effect", "NoSchedule"}}});
    }
    devices.push_back(std::move(device));
  }
  return {
      {"apiVersion", kResourceApiVersion},
      {"kind", "ResourceSlice"},
      {"metadata", {{"name", slice_name(options)}}},
      {"spec",
       {{"driver", options.driver},
        {"nodeName", options.node_name},
        {"pool",
         {{"name", options.node_name}, {"generation", options.pool_generation}, {"resourceSliceCount", 1}}},
        {"devices", devices}}},
  };
}

}  // namespace gpuslice::node::dra
