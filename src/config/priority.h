// GPUSLICE_PRIORITY: the priority of a container among the containers sharing a GPU
// (docs/priority.md), parsed into the one Priority type (common/priority.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "common/priority.h"
#include "common/result.h"

namespace gpuslice::config {

using gpuslice::Priority;
using gpuslice::priority_name;

// "high" | "normal" | "low", case-insensitive, surrounding blanks ignored; anything else is an
// error naming the accepted values.
Result<Priority> parse_priority(std::string_view text);

// A duration for the priority tunables: a whole number followed by ns, us, ms or s ("500us",
// "2ms"), surrounding blanks ignored; within [min_ns, max_ns], else an error naming the range.
Result<std::uint64_t> parse_duration_ns(std::string_view text, std::uint64_t min_ns, std::uint64_t max_ns);

// The container's own priority tunables (GPUSLICE_PRIORITY_IN_FLIGHT, _RAMP, _GRACE, _FLOOR, _COST,
// _LONG_KERNEL, _LIGHT_SHARE, _REQUEST_SHARE, _REFRESH);
// unset: the defaults documented in docs/priority.md.
struct PriorityTunables {
  std::optional<std::uint64_t> in_flight_ns;      // lower-priority work it keeps queued beside a higher one
  std::optional<std::uint64_t> ramp_ns;           // a higher one's idle time after which that is all allowed
  std::optional<std::uint64_t> grace_ns;          // how long it still counts as busy after its work ended
  std::optional<unsigned> floor_percent;          // its minimum admission share while held (0 = none)
  std::optional<bool> per_kernel_cost;            // its bound costs launches by kernel (or by the average)
  std::optional<bool> long_kernels_alone;         // a kernel over half its bound waits for an empty queue
  std::optional<unsigned> light_share_percent;    // a higher one busier than this holds it (0 = any does)
  std::optional<unsigned> request_share_percent;  // its bound at most this share of a higher one's request
  std::optional<std::uint64_t> refresh_ns;        // how often a launching thread re-reads the higher ones
};

}  // namespace gpuslice::config
