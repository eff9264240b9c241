// This node's ResourceSlice (resource.k8s.io/v1): one device per GPU, named gpu-<index>, which
// several claims may share (allowMultipleAllocations). Each claim consumes two capacities:
//   memory   bytes of VRAM (request policy: default the whole GPU, at least 1 MiB, in steps of 1 MiB)
//   compute  percent of the GPU's SM time (default 100, 1-100 in steps of 1)
// A claim that asks for no capacity gets the defaults, i.e. the whole GPU, so the scheduler keeps
// whole-GPU claims and fractional claims on one GPU apart with these two capacities alone.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "node/gpu_source.h"

namespace gpuslice::node::dra {

inline constexpr const char* kDriverName = "gpuslice.io";
inline constexpr const char* kResourceApiVersion = "resource.k8s.io/v1";
inline constexpr const char* kMemoryCapacity = "memory";
inline constexpr const char* kComputeCapacity = "compute";
inline constexpr std::uint64_t kMemoryStep = 1ULL << 20;

struct SliceOptions {
  std::string driver = kDriverName;
  std::string node_name;
  std::uint64_t pool_generation = 1;
  std::string enforcement = "memory,compute";  // what gpuslice enforces on these GPUs
};

// "gpu-<index>": stable for a GPU while the node's GPUs stay in their slots.
std::string device_name(const GpuInfo& gpu);
// The slice's object name: "<node>-<driver with dots as dashes>".
std::string slice_name(const SliceOptions& options);
// The memory a device publishes: the GPU's total rounded down to whole MiB (the request step).
std::uint64_t published_memory(const GpuInfo& gpu);
// "580.159.04" -> "580.159.4", "9.0" -> "9.0.0": DRA version attributes are semantic versions.
std::optional<std::string> semantic_version(std::string_view dotted);

// The whole ResourceSlice object (apiVersion, kind, metadata.name, spec).
nlohmann::json build_resource_slice(const std::vector<GpuInfo>& gpus, const SliceOptions& options);

}  // namespace gpuslice::node::dra
