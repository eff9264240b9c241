// This node's ResourceSlices (resource.k8s.io/v1), one pool named after the node. Per GPU:
//   gpu-<index>        shared by several claims (allowMultipleAllocations); each claim consumes two
//                      capacities:
//                        memory   bytes of VRAM (request policy: default the whole GPU, at least 1 MiB,
//                                 in steps of 1 MiB)
//                        compute  percent of the GPU's SM time (default 100, 1-100 in steps of 1)
//                      A claim that asks for no capacity gets the defaults, i.e. the whole GPU.
//   gpu-<index>-whole  the same GPU as one device for one claim (partitionable devices only).
// With partitionable devices (KEP-4815) both consume all of the counter set gpu-<index> (memory
// bytes, compute percent). Where the counter sets go depends on the API server (SliceLayout): in a
// slice of their own (Kubernetes 1.35+), or beside the devices that consume them (1.34 with
// DRAPartitionableDevices, which refuses a reference to a counter set of another slice). A device allowing
// multiple allocations consumes its counters once, while any claim holds a share of it, so a claim of the
// whole device and a share of the shared one can never be allocated together.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "node/gpus/gpu_source.h"

namespace gpuslice::node::dra {

inline constexpr const char* kDriverName = "gpuslice.io";
inline constexpr const char* kResourceApiVersion = "resource.k8s.io/v1";
inline constexpr const char* kMemoryCapacity = "memory";
inline constexpr const char* kComputeCapacity = "compute";
inline constexpr std::uint64_t kMemoryStep = 1ULL << 20;
inline constexpr const char* kWholeSuffix = "-whole";
inline constexpr const char* kWholeAttribute = "wholeGpu";  // bool: true on gpu-<index>-whole
// The API's bounds: 64 devices in a slice once any consumes counters, 8 counter sets in a slice.
inline constexpr std::size_t kMaxPartitionableGpus = 32;
inline constexpr std::size_t kMaxCounterSetsPerSlice = 8;

// The forms of the pool, richest first; the publisher uses the first the API server keeps whole.
enum class SliceLayout {
  SeparateCounters,  // whole and shared devices; counter sets in their own slices (1.35+)
  CountersBeside,    // the same, each slice holding the counter sets of its own devices (1.34 + gate)
  SharedOnly,        // shared devices with consumable capacity; no whole devices, no counters
  Exclusive,         // devices as the server keeps them without DRAConsumableCapacity: one claim
                     // per GPU, no fraction schedulable (the last resort)
};
const char* layout_name(SliceLayout layout);

struct SliceOptions {
  std::string driver = kDriverName;
  std::string node_name;
  std::uint64_t pool_generation = 1;
  std::string enforcement = "memory,compute";  // what gpuslice enforces on these GPUs
  // Publish the whole-GPU devices and the counters that keep them apart from the shared ones. Off
  // where the API server drops the fields (DRAPartitionableDevices off), or with more than
  // kMaxPartitionableGpus GPUs: one slice of shared devices only, as before.
  bool partitionable = true;
  SliceLayout layout = SliceLayout::SeparateCounters;  // partitionable false: SharedOnly at most
};

// "gpu-<index>": stable for a GPU while the node's GPUs stay in their slots.
std::string device_name(const GpuInfo& gpu);
// "gpu-<index>-whole": the GPU as one unshared device.
std::string whole_device_name(const GpuInfo& gpu);
// "gpu-<index>": the counter set both devices of a GPU consume.
std::string counter_set_name(const GpuInfo& gpu);
// The devices slice's object name: "<node>-<driver with dots as dashes>"; counter slices add
// "-counters-<k>".
std::string slice_name(const SliceOptions& options);
std::string counter_slice_name(const SliceOptions& options, std::size_t k);
// Whether a slice name is one this pool's slices may have (any layout).
bool own_slice_name(const SliceOptions& options, const std::string& name);
// Whether these GPUs are published with whole-GPU devices and counters.
bool publishes_partitions(const std::vector<GpuInfo>& gpus, const SliceOptions& options);
// The memory a device publishes: the GPU's total rounded down to whole MiB (the request step).
std::uint64_t published_memory(const GpuInfo& gpu);
// "580.159.04" -> "580.159.4", "9.0" -> "9.0.0": DRA version attributes are semantic versions.
std::optional<std::string> semantic_version(std::string_view dotted);

// Every ResourceSlice object of the pool (apiVersion, kind, metadata.name, spec): the devices slice
// first, then the counter slices (none when !publishes_partitions). With CountersBeside, one slice
// per kMaxCounterSetsPerSlice GPUs, each with its devices and their counter sets.
std::vector<nlohmann::json> build_resource_slices(const std::vector<GpuInfo>& gpus,
                                                  const SliceOptions& options);

}  // namespace gpuslice::node::dra
