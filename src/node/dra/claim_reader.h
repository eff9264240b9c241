// Reads what the scheduler allocated to a ResourceClaim for this driver, from the claim object the
// API server returned, and checks it against this node: every device of ours must come from this
// node's pool and be one of its GPUs, its consumed capacity within the GPU, and the claim's own
// configuration may only tighten what was scheduled. Nothing here touches the host.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "node/dra/claim_config.h"
#include "node/gpus/gpu_source.h"

namespace gpuslice::node::dra {

// resource.k8s.io/v1 AllocationResultsMaxSize: the API server never allocates more to one claim.
inline constexpr std::size_t kMaxAllocatedDevices = 32;

// A path segment as the API expects it (names are DNS labels; anything else is refused): what a
// namespace, claim or pod name must be before it reaches a path, a log, a label or the checkpoint.
bool valid_object_name(const std::string& name);

struct ClaimRef {
  std::string ns, name, uid;
};

// One device allocated to one request of the claim, with what it may use there.
struct AllocatedDevice {
  std::string request;  // the claim's request name
  std::string pool;
  std::string device;    // "gpu-0", or "gpu-0-whole" (the GPU unshared: no fraction)
  bool whole = false;    // the whole-GPU device
  std::string share_id;  // set when the device is shared (allowMultipleAllocations)
  GpuInfo gpu;
  std::uint64_t memory_bytes = 0;  // the limit to enforce (consumed capacity, or the config's tighter limit)
  std::uint64_t guarantee_bytes = 0;   // the config's memory.request, at most memory_bytes; 0: none
  std::optional<unsigned> compute;     // percent; unset: no compute limit (a whole GPU)
  std::uint64_t scheduled_memory = 0;  // what the scheduler counted
  unsigned scheduled_compute = 100;
  ClaimConfig config;
  std::string note;  // said in the log when the claim is prepared (e.g. a dropped capacity request)
};

struct ClaimAllocation {
  ClaimRef ref;
  std::vector<AllocatedDevice> devices;  // ours only; another driver's devices are not our business
  std::optional<config::Priority> priority;
  std::vector<std::string> pods;  // status.reservedFor: the pods the claim is reserved for
};

// What a claim is prepared with when the scheduler gave it a shared gpu-N without consumed capacity:
// an API server without DRAConsumableCapacity (the 1.34 default; every release before) drops the
// claim's capacity request and the device's allowMultipleAllocations, so the claim got the whole GPU
// whatever it asked. --dropped-capacity: refuse (the default: the claim fails to start, saying why),
// whole (the whole GPU, logged), or a size (that memory limit, logged). A claim whose own config
// sets memory.limit is prepared with it in every case.
struct DroppedCapacityPolicy {
  enum class Kind { Refuse, Whole, Cap };
  Kind kind = Kind::Refuse;
  std::uint64_t cap_bytes = 0;
};
Result<DroppedCapacityPolicy> parse_dropped_capacity(const std::string& text);

struct DriverNode {
  std::string driver;
  std::string pool;           // this node's pool (its node name)
  std::vector<GpuInfo> gpus;  // as published in the slice
  DroppedCapacityPolicy dropped_capacity;
};

// `claim` is the ResourceClaim object; `ref` what the kubelet asked for (a claim whose uid,
// namespace or name differ is refused: the API server answered for another object).
Result<ClaimAllocation> read_claim_allocation(const nlohmann::json& claim, const ClaimRef& ref,
                                              const DriverNode& node);

// A Kubernetes quantity as the scheduler writes consumed capacity ("8Gi", "30", "8589934592").
Result<std::uint64_t> quantity_value(const nlohmann::json& value);

}  // namespace gpuslice::node::dra
