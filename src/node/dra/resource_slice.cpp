#include "node/dra/resource_slice.h"

namespace gpuslice::node::dra {

using nlohmann::json;

std::string device_name(const GpuInfo& gpu) { return "gpu-" + std::to_string(gpu.index); }
std::string whole_device_name(const GpuInfo& gpu) { return device_name(gpu) + kWholeSuffix; }
std::string counter_set_name(const GpuInfo& gpu) { return device_name(gpu); }

std::string slice_name(const SliceOptions& options) {
  std::string driver = options.driver;
  for (char& c : driver) {
    if (c == '.') c = '-';
  }
  return options.node_name + "-" + driver;
}

std::string counter_slice_name(const SliceOptions& options, std::size_t k) {
  return slice_name(options) + "-counters-" + std::to_string(k);
}

const char* layout_name(SliceLayout layout) {
  switch (layout) {
    case SliceLayout::SeparateCounters:
      return "separate-counters";
    case SliceLayout::CountersBeside:
      return "counters-beside-devices";
    case SliceLayout::SharedOnly:
      return "shared-only";
    case SliceLayout::Exclusive:
      return "whole-gpus-only";
  }
  return "?";
}

bool own_slice_name(const SliceOptions& options, const std::string& name) {
  const std::string base = slice_name(options);
  if (name == base) return true;
  if (name.rfind(base + "-", 0) != 0) return false;
  std::string rest = name.substr(base.size() + 1);
  if (rest.rfind("counters-", 0) == 0) rest = rest.substr(9);
  return !rest.empty() && rest.size() < 4 && rest.find_first_not_of("0123456789") == std::string::npos;
}

bool publishes_partitions(const std::vector<GpuInfo>& gpus, const SliceOptions& options) {
  const bool layout =
      options.layout == SliceLayout::SeparateCounters || options.layout == SliceLayout::CountersBeside;
  return options.partitionable && layout && !gpus.empty() && gpus.size() <= kMaxPartitionableGpus;
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

namespace {

json slice_object(const std::string& name, const SliceOptions& options, std::size_t count, json body) {
  json spec = {{"driver", options.driver},
               {"nodeName", options.node_name},
               {"pool",
                {{"name", options.node_name},
                 {"generation", options.pool_generation},
                 {"resourceSliceCount", count}}}};
  for (auto& [key, value] : body.items()) spec[key] = std::move(value);
  return {{"apiVersion", kResourceApiVersion},
          {"kind", "ResourceSlice"},
          {"metadata", {{"name", name}}},
          {"spec", spec}};
}

// All of the GPU: what each of its two devices consumes, and what its counter set holds.
json whole_gpu_counters(const GpuInfo& gpu) {
  return {{kMemoryCapacity, {{"value", std::to_string(published_memory(gpu))}}},
          {kComputeCapacity, {{"value", "100"}}}};
}

}  // namespace

std::vector<json> build_resource_slices(const std::vector<GpuInfo>& gpus, const SliceOptions& options) {
  const bool partitions = publishes_partitions(gpus, options);
  json devices = json::array();
  json counter_sets = json::array();
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
    attributes[kWholeAttribute] = {{"bool", false}};
    json shared = {{"name", device_name(gpu)}, {"attributes", attributes}, {"capacity", capacity}};
    if (options.layout == SliceLayout::Exclusive) {
      // What a server without DRAConsumableCapacity keeps: the capacities, no request policy.
      for (auto& [name, c] : shared["capacity"].items()) c.erase("requestPolicy");
    } else {
      shared["allowMultipleAllocations"] = true;
    }
    json whole;
    if (partitions) {
      const json consumes =
          json::array({{{"counterSet", counter_set_name(gpu)}, {"counters", whole_gpu_counters(gpu)}}});
      shared["consumesCounters"] = consumes;
      attributes[kWholeAttribute] = {{"bool", true}};
      whole = {{"name", whole_device_name(gpu)},
               {"attributes", attributes},
               {"capacity", {{kMemoryCapacity, {{"value", memory}}}, {kComputeCapacity, {{"value", "100"}}}}},
               {"consumesCounters", consumes}};
      counter_sets.push_back({{"name", counter_set_name(gpu)}, {"counters", whole_gpu_counters(gpu)}});
    }
    if (!gpu.healthy) {
      // A failing GPU stays listed (claims on it can still be unprepared) but takes no new claims.
      const json taints = json::array({{{"key", std::string(options.driver) + "/unhealthy"},
                                        {"value", "true"},
                                        {"effect", "NoSchedule"}}});
      shared["taints"] = taints;
      if (partitions) whole["taints"] = taints;
    }
    devices.push_back(std::move(shared));
    if (partitions) devices.push_back(std::move(whole));
  }
  std::vector<json> slices;
  if (partitions && options.layout == SliceLayout::CountersBeside) {
    // Each slice: the devices of up to kMaxCounterSetsPerSlice GPUs and their counter sets.
    const std::size_t count = (counter_sets.size() + kMaxCounterSetsPerSlice - 1) / kMaxCounterSetsPerSlice;
    for (std::size_t k = 0; k < count; ++k) {
      json part = json::array(), sets = json::array();
      for (std::size_t i = k * kMaxCounterSetsPerSlice;
           i < counter_sets.size() && i < (k + 1) * kMaxCounterSetsPerSlice; ++i) {
        sets.push_back(counter_sets[i]);
        part.push_back(devices[2 * i]);
        part.push_back(devices[2 * i + 1]);
      }
      slices.push_back(
          slice_object(k == 0 ? slice_name(options) : slice_name(options) + "-" + std::to_string(k), options,
                       count, {{"devices", part}, {"sharedCounters", sets}}));
    }
    return slices;
  }
  const std::size_t counter_slices =
      (counter_sets.size() + kMaxCounterSetsPerSlice - 1) / kMaxCounterSetsPerSlice;
  const std::size_t count = 1 + counter_slices;
  slices.push_back(slice_object(slice_name(options), options, count, {{"devices", devices}}));
  for (std::size_t k = 0; k < counter_slices; ++k) {
    json sets = json::array();
    for (std::size_t i = k * kMaxCounterSetsPerSlice;
         i < counter_sets.size() && i < (k + 1) * kMaxCounterSetsPerSlice; ++i)
      sets.push_back(counter_sets[i]);
    slices.push_back(
        slice_object(counter_slice_name(options, k), options, count, {{"sharedCounters", sets}}));
  }
  return slices;
}

}  // namespace gpuslice::node::dra
