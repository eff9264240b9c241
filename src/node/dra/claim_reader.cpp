#include "node/dra/claim_reader.h"

#include <set>

#include "config/text_util.h"
#include "node/admission/quantity.h"
#include "node/dra/resource_slice.h"
#include "node/http/untrusted_json.h"

namespace gpuslice::node::dra {
namespace {

using nlohmann::json;

std::string shown(std::string_view text) { return "\"" + config::detail::printable(text, 80) + "\""; }

const json* at(const json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

std::string text_at(const json& object, const char* key) {
  const json* v = at(object, key);
  return v && v->is_string() ? v->get<std::string>() : std::string();
}

// Each field an entry sets replaces that field only: a claim that names no level (or no memory
// limit) keeps what its class set.
void merge_into(ClaimConfig& into, const ClaimConfig& entry) {
  if (entry.memory_request) into.memory_request = entry.memory_request;
  if (entry.memory_limit) into.memory_limit = entry.memory_limit;
  if (entry.compute_request) into.compute_request = entry.compute_request;
  if (entry.compute_limit) into.compute_limit = entry.compute_limit;
  if (entry.priority) into.priority = entry.priority;
  into.on_pressure = entry.on_pressure;
}

// The configuration that applies to `request`: the opaque entries of our driver naming it (or
// naming no request), merged field by field in order. The API lists class configuration before the
// claim's, so the claim's wins a field both set, except the level: a DeviceClass is the cluster
// operator's and a claim the tenant's, so a level the class names is the claim's default and its
// ceiling (the lower of the two applies).
Result<ClaimConfig> config_for(const json* configs, const std::string& request, const std::string& driver) {
  ClaimConfig chosen;
  std::optional<config::Priority> class_level;
  if (!configs) return chosen;
  if (!configs->is_array()) return make_error("status.allocation.devices.config: not a list");
  for (const auto& entry : *configs) {
    const json* opaque = at(entry, "opaque");
    if (!opaque || text_at(*opaque, "driver") != driver) continue;
    const json* requests = at(entry, "requests");
    bool applies = !requests || !requests->is_array() || requests->empty();
    if (requests && requests->is_array()) {
      for (const auto& r : *requests) {
        // "request/subrequest" names apply to the request they are part of.
        if (r.is_string()) {
          const std::string name = r.get<std::string>();
          if (name == request || name.rfind(request + "/", 0) == 0) applies = true;
        }
      }
    }
    if (!applies) continue;
    const json* parameters = at(*opaque, "parameters");
    if (!parameters) return make_error("opaque configuration of " + driver + " without parameters");
    auto parsed = parse_claim_config(json_text(*parameters));
    if (!parsed) return make_error("configuration of request " + shown(request) + ": " + parsed.error());
    if (text_at(entry, "source") == "FromClass" && parsed->priority) {
      class_level = class_level ? lower_priority(*class_level, *parsed->priority) : *parsed->priority;
    }
    merge_into(chosen, *parsed);
  }
  if (class_level)
    chosen.priority = chosen.priority ? lower_priority(*chosen.priority, *class_level) : *class_level;
  return chosen;
}

}  // namespace

Result<std::uint64_t> quantity_value(const json& value) {
  if (value.is_number_unsigned()) return value.get<std::uint64_t>();
  if (!value.is_string()) return make_error("not a quantity");
  return parse_quantity(value.get<std::string>());
}

bool valid_object_name(const std::string& name) {
  if (name.empty() || name.size() > 253) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.')) return false;
  }
  return true;
}

Result<DroppedCapacityPolicy> parse_dropped_capacity(const std::string& text) {
  DroppedCapacityPolicy p;
  if (text == "refuse") return p;
  if (text == "whole") {
    p.kind = DroppedCapacityPolicy::Kind::Whole;
    return p;
  }
  auto size = parse_quantity(text);
  if (!size || *size < kMemoryStep)
    return make_error("expected refuse, whole or a memory size of at least 1Mi (e.g. 4Gi), not '" +
                      config::detail::printable(text, 40) + "'");
  p.kind = DroppedCapacityPolicy::Kind::Cap;
  p.cap_bytes = *size;
  return p;
}

Result<ClaimAllocation> read_claim_allocation(const json& claim, const ClaimRef& ref,
                                              const DriverNode& node) {
  const json* metadata = at(claim, "metadata");
  if (!metadata) return make_error("the API server's answer is not a ResourceClaim (no metadata)");
  if (text_at(*metadata, "uid") != ref.uid)
    return make_error("the API server returned claim uid " + shown(text_at(*metadata, "uid")) + ", not " +
                      shown(ref.uid) + " (deleted and created again?)");
  if (text_at(*metadata, "namespace") != ref.ns || text_at(*metadata, "name") != ref.name)
    return make_error("the API server returned another claim than " + shown(ref.ns + "/" + ref.name));
  const json* status = at(claim, "status");
  const json* allocation = status ? at(*status, "allocation") : nullptr;
  if (!allocation) return make_error("claim " + shown(ref.ns + "/" + ref.name) + " is not allocated");
  const json* devices = at(*allocation, "devices");
  const json* results = devices ? at(*devices, "results") : nullptr;
  if (!results || !results->is_array()) return make_error("claim allocation lists no devices");
  if (results->size() > kMaxAllocatedDevices)
    return make_error("claim allocation lists " + std::to_string(results->size()) + " devices, more than " +
                      std::to_string(kMaxAllocatedDevices));
  const json* configs = at(*devices, "config");

  ClaimAllocation out;
  out.ref = ref;
  std::set<std::string> seen;
  std::set<std::string> whole_gpus, shared_gpus;  // by UUID
  for (const auto& result : *results) {
    if (text_at(result, "driver") != node.driver) continue;
    AllocatedDevice d;
    d.request = text_at(result, "request");
    d.pool = text_at(result, "pool");
    d.device = text_at(result, "device");
    d.share_id = text_at(result, "shareID");
    if (d.pool != node.pool)
      return make_error("device " + shown(d.device) + " of pool " + shown(d.pool) +
                        " belongs to another node than " + shown(node.pool));
    const GpuInfo* gpu = nullptr;
    for (const auto& g : node.gpus) {
      if (device_name(g) == d.device) gpu = &g;
      if (whole_device_name(g) == d.device) {
        gpu = &g;
        d.whole = true;
      }
    }
    if (!gpu) return make_error("device " + shown(d.device) + " is not a GPU of this node");
    if (!seen.insert(d.device + "/" + d.share_id).second)
      return make_error("device " + shown(d.device) + " allocated twice to one claim");
    // The counters keep a whole GPU and shares of it apart across claims; within one claim too.
    (d.whole ? whole_gpus : shared_gpus).insert(gpu->uuid);
    if (whole_gpus.count(gpu->uuid) && shared_gpus.count(gpu->uuid))
      return make_error("GPU " + shown(device_name(*gpu)) + " is allocated to one claim both whole (" +
                        shown(whole_device_name(*gpu)) + ") and as a share");
    if (d.whole && (!d.share_id.empty() || at(result, "consumedCapacity")))
      return make_error("device " + shown(d.device) +
                        " is one GPU for one claim: its allocation carries no shareID or consumedCapacity");
    d.gpu = *gpu;
    d.scheduled_memory = published_memory(*gpu);
    d.scheduled_compute = 100;
    // No consumed capacity: the whole-GPU device, or a scheduler without consumable capacity
    // (Kubernetes < 1.34) gave the whole device.
    if (const json* consumed = at(result, "consumedCapacity")) {
      if (!consumed->is_object())
        return make_error("consumedCapacity of " + shown(d.device) + " is not a map");
      for (const auto& [name, value] : consumed->items()) {
        auto amount = quantity_value(value);
        if (!amount)
          return make_error("consumedCapacity " + shown(name) + " of " + shown(d.device) + ": " +
                            amount.error());
        if (name == kMemoryCapacity) {
          if (*amount == 0 || *amount > published_memory(*gpu))
            return make_error("consumedCapacity memory " + std::to_string(*amount) + " of " +
                              shown(d.device) + " is not within the GPU's " +
                              std::to_string(published_memory(*gpu)) + " bytes");
          d.scheduled_memory = *amount;
        } else if (name == kComputeCapacity) {
          if (*amount == 0 || *amount > 100)
            return make_error("consumedCapacity compute " + std::to_string(*amount) + " of " +
                              shown(d.device) + " is not within 1-100");
          d.scheduled_compute = static_cast<unsigned>(*amount);
        } else {
          return make_error("consumedCapacity " + shown(name) + " is no capacity of " + shown(d.device));
        }
      }
    }
    auto config = config_for(configs, d.request, node.driver);
    if (!config) return make_error(config.error());
    d.config = *config;
    d.memory_bytes = d.scheduled_memory;
    if (d.config.memory_limit) {
      if (*d.config.memory_limit > d.scheduled_memory)
        return make_error("memory.limit " + std::to_string(*d.config.memory_limit) + " is above the " +
                          std::to_string(d.scheduled_memory) + " bytes the scheduler allocated on " +
                          shown(d.device));
      d.memory_bytes = *d.config.memory_limit;
    }
    // A shared device allocated as if exclusive: the server dropped what the claim asked.
    if (!d.whole && d.share_id.empty() && !at(result, "consumedCapacity") && !d.config.memory_limit) {
      const std::string why = "device " + shown(d.device) +
                              " was allocated without consumed capacity: the API server keeps no capacity "
                              "requests (DRAConsumableCapacity off), so the scheduler gave the whole GPU "
                              "whatever the claim asked";
      switch (node.dropped_capacity.kind) {
        case DroppedCapacityPolicy::Kind::Refuse:
          return make_error(why +
                            "; refused (gpuslice-node dra --dropped-capacity=refuse): set memory.limit in "
                            "the claim's gpuslice.io config, or ask the operator for whole GPUs or a cap");
        case DroppedCapacityPolicy::Kind::Whole:
          d.note = why + "; prepared with the whole GPU (--dropped-capacity=whole)";
          break;
        case DroppedCapacityPolicy::Kind::Cap:
          d.memory_bytes =
              std::min(d.memory_bytes, node.dropped_capacity.cap_bytes / kMemoryStep * kMemoryStep);
          d.note = why + "; prepared with the operator's cap of " + std::to_string(d.memory_bytes) +
                   " bytes (--dropped-capacity)";
          break;
      }
    } else if (!d.whole && d.share_id.empty() && !at(result, "consumedCapacity")) {
      d.note = "device " + shown(d.device) +
               " was allocated without consumed capacity (DRAConsumableCapacity off): prepared with the "
               "claim's own memory.limit";
    }
    // memory.request is the claim's guarantee (Kubernetes' request): within what it may use.
    if (d.config.memory_request) {
      if (*d.config.memory_request > d.memory_bytes)
        return make_error("memory.request " + std::to_string(*d.config.memory_request) + " is above the " +
                          std::to_string(d.memory_bytes) + " bytes the claim may use on " + shown(d.device) +
                          " (a guarantee is at most the limit)");
      d.guarantee_bytes = *d.config.memory_request;
    }
    if (d.scheduled_compute < 100) d.compute = d.scheduled_compute;
    if (d.config.compute_limit) {
      if (*d.config.compute_limit > d.scheduled_compute)
        return make_error("compute.limit " + std::to_string(*d.config.compute_limit) + " is above the " +
                          std::to_string(d.scheduled_compute) + "% the scheduler allocated on " +
                          shown(d.device));
      if (*d.config.compute_limit < 100) d.compute = *d.config.compute_limit;
    }
    if (d.config.priority) {
      // One level for the whole claim: its processes share one state directory.
      if (out.priority && *out.priority != *d.config.priority)
        return make_error("the claim's requests ask for different priorities");
      out.priority = d.config.priority;
    }
    out.devices.push_back(std::move(d));
  }
  if (out.devices.empty()) return make_error("claim has no device of driver " + shown(node.driver));
  if (const json* reserved = at(*status, "reservedFor"); reserved && reserved->is_array()) {
    for (const auto& consumer : *reserved) {
      // Only object names: the pod name reaches logs, /metrics labels and the checkpoint.
      if (text_at(consumer, "resource") == "pods" && out.pods.size() < 32 &&
          valid_object_name(text_at(consumer, "name")))
        out.pods.push_back(text_at(consumer, "name"));
    }
  }
  return out;
}

}  // namespace gpuslice::node::dra
