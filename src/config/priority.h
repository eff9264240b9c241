// GPUSLICE_PRIORITY: the priority of a container among the containers sharing a GPU
// (docs/priority.md). The values are those the node channel publishes (shm::Priority).
#pragma once

#include <cstdint>
#include <string_view>

#include "common/result.h"

namespace gpuslice::config {

enum class Priority : std::uint32_t { Low = 0, Normal = 1, High = 2 };

// "high" | "normal" | "low", case-insensitive, surrounding blanks ignored; anything else is an
// error naming the accepted values.
Result<Priority> parse_priority(std::string_view text);
const char* priority_name(Priority priority);

}  // namespace gpuslice::config
