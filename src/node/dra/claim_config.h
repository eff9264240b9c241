// The opaque parameters a ResourceClaim (or its DeviceClass) passes to the gpuslice driver:
//   {"apiVersion": "gpuslice.io/v1alpha1", "kind": "SliceConfig",
//    "memory": {"request": "8Gi", "limit": "8Gi"}, "compute": {"request": 30, "limit": 30},
//    "priority": "high", "onPressure": "fail"}
// decoded into typed values before anything decides on them. Every field is optional; unknown
// fields are errors (a typo must not silently leave a claim unlimited).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"
#include "config/priority.h"

namespace gpuslice::node::dra {

inline constexpr const char* kConfigApiVersion = "gpuslice.io/v1alpha1";
inline constexpr const char* kConfigKind = "SliceConfig";
// The parameters are a few hundred bytes; the API server allows far more than we read.
inline constexpr std::size_t kMaxConfigBytes = std::size_t{16} * 1024;
inline constexpr std::size_t kMaxConfigDepth = 8;

// What happens when the claim's processes want more than their limit. Only `Fail` is enforced
// today: allocations past the memory limit fail, kernels past the compute share wait.
enum class PressurePolicy { Fail };

struct ClaimConfig {
  std::optional<std::uint64_t> memory_request;  // bytes
  std::optional<std::uint64_t> memory_limit;    // bytes; unset: what the scheduler allocated
  std::optional<unsigned> compute_request;      // percent 1-100
  std::optional<unsigned> compute_limit;        // percent 1-100; unset: what was allocated
  std::optional<config::Priority> priority;     // unset: the container's own GPUSLICE_PRIORITY
  PressurePolicy on_pressure = PressurePolicy::Fail;

  bool operator==(const ClaimConfig&) const = default;
};

// Parses the `parameters` of an opaque device configuration, given as JSON text. Errors name the
// field and the bad value (escaped, shortened), e.g. `memory.limit: "8 GB" is not a quantity`.
Result<ClaimConfig> parse_claim_config(std::string_view json_text);

const char* pressure_policy_name(PressurePolicy policy);

}  // namespace gpuslice::node::dra
